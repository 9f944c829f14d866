#include "bench/timeline_report.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace rs::bench {

std::vector<TimelineRow> timeline_rows(std::vector<cuda::KernelSpan> spans) {
  std::stable_sort(spans.begin(), spans.end(),
                   [](const cuda::KernelSpan& a, const cuda::KernelSpan& b) { return a.start_ns < b.start_ns; });
  std::vector<TimelineRow> rows;
  if (spans.empty()) return rows;
  const double t0 = static_cast<double>(spans.front().start_ns);
  for (size_t i = 0; i < spans.size(); ++i) {
    TimelineRow r;
    r.kernel = spans[i].kernel;
    r.start_us = (static_cast<double>(spans[i].start_ns) - t0) / 1e3;
    r.end_us = (static_cast<double>(spans[i].end_ns) - t0) / 1e3;
    r.dur_us = r.end_us - r.start_us;
    r.gap_us = i == 0 ? 0.0 : r.start_us - rows.back().end_us;
    rows.push_back(r);
  }
  return rows;
}

TimelineTotals timeline_totals(const std::vector<TimelineRow>& rows) {
  TimelineTotals t;
  t.kernels = static_cast<int>(rows.size());
  double covered_to = 0, first = 0, last = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const TimelineRow& r = rows[i];
    t.sum_us += r.dur_us;
    if (i == 0) first = covered_to = r.start_us;
    // Rows are in start order: the union grows by the part of this span past what is covered.
    if (r.end_us > covered_to) {
      t.busy_us += r.end_us - std::max(r.start_us, covered_to);
      covered_to = r.end_us;
    }
    last = std::max(last, r.end_us);
  }
  t.span_us = rows.empty() ? 0 : last - first;
  t.idle_us = t.span_us - t.busy_us;
  return t;
}

std::vector<TimelineRow> timeline_window(const std::vector<TimelineRow>& rows, const std::string& marker,
                                         int occurrence, int before, int after) {
  int seen = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].kernel.find(marker) == std::string::npos) continue;
    if (seen++ < occurrence) continue;
    const size_t b = i >= static_cast<size_t>(std::max(0, before)) ? i - before : 0;
    const size_t e = std::min(rows.size(), i + 1 + static_cast<size_t>(std::max(0, after)));
    return std::vector<TimelineRow>(rows.begin() + static_cast<std::ptrdiff_t>(b), rows.begin() + static_cast<std::ptrdiff_t>(e));
  }
  return {};
}

std::vector<TimelineAdvance> timeline_advance(const std::vector<TimelineRow>& rows) {
  std::map<std::string, std::vector<double>> by_kernel;
  double frontier = rows.empty() ? 0 : rows.front().start_us;
  for (const TimelineRow& r : rows) {
    by_kernel[r.kernel].push_back(std::max(0.0, r.end_us - frontier));
    frontier = std::max(frontier, r.end_us);
  }
  std::vector<TimelineAdvance> out;
  for (auto& [kernel, adv] : by_kernel) {
    TimelineAdvance a;
    a.kernel = kernel;
    a.count = static_cast<int>(adv.size());
    for (double v : adv) a.total_us += v;
    std::sort(adv.begin(), adv.end());
    const size_t n = adv.size();
    a.median_us = n % 2 ? adv[n / 2] : 0.5 * (adv[n / 2 - 1] + adv[n / 2]);
    out.push_back(a);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TimelineAdvance& a, const TimelineAdvance& b) { return a.total_us > b.total_us; });
  return out;
}

std::string timeline_csv(const std::vector<TimelineRow>& rows) {
  std::string out = "index,kernel,start_us,end_us,dur_us,gap_us\n";
  char buf[128];
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string name;
    for (char ch : rows[i].kernel) name += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    std::snprintf(buf, sizeof buf, ",%.3f,%.3f,%.3f,%.3f\n", rows[i].start_us, rows[i].end_us, rows[i].dur_us,
                  rows[i].gap_us);
    out += std::to_string(i) + ",\"" + name + "\"" + buf;
  }
  return out;
}

}  // namespace rs::bench
