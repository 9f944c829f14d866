#include "bench/wait_probe_report.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>

namespace rs::bench {

namespace {
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
// The replay's time origin: the earliest wait entry.
uint64_t probe_t0(const std::vector<kern::WaitProbeRecord>& records) {
  uint64_t t0 = UINT64_MAX;
  for (const kern::WaitProbeRecord& r : records)
    if (r.grid != 0 && r.tag == 0) t0 = std::min(t0, r.entry_ns);
  return t0;
}
}  // namespace

std::vector<ProbeLaunch> probe_launches(const std::vector<kern::WaitProbeRecord>& records,
                                        const std::vector<cuda::KernelSpan>& spans,
                                        const std::vector<uint8_t>* sm_side) {
  struct Acc {
    uint64_t first_entry = UINT64_MAX, last_entry = 0, first_exit = UINT64_MAX, last_exit = 0;
    uint32_t blocks = 0, threads = 0;
    int records = 0;
    uint64_t mark_last[kern::kWaitProbeSlots] = {};
    uint64_t side_last[2][kern::kWaitProbeSlots] = {};  // slot 0: wait exit
  };
  auto side_of = [&](uint32_t smid) { return sm_side && smid < sm_side->size() ? int((*sm_side)[smid] != 0) : -1; };
  std::map<uint64_t, Acc> by_grid;
  const uint64_t t0 = probe_t0(records);
  for (const kern::WaitProbeRecord& r : records) {
    if (r.grid == 0 || r.tag >= static_cast<uint32_t>(kern::kWaitProbeSlots)) continue;  // a mark slot never set
    if (r.tag > 0) continue;  // marks after their grid's waits, below
    Acc& a = by_grid[r.grid];
    a.first_entry = std::min(a.first_entry, r.entry_ns);
    a.last_entry = std::max(a.last_entry, r.entry_ns);
    a.first_exit = std::min(a.first_exit, r.exit_ns);
    a.last_exit = std::max(a.last_exit, r.exit_ns);
    a.blocks = r.blocks;
    a.threads = r.threads;
    ++a.records;
    if (const int side = side_of(r.smid); side >= 0) a.side_last[side][0] = std::max(a.side_last[side][0], r.exit_ns);
  }
  for (const kern::WaitProbeRecord& r : records) {
    if (r.grid == 0 || r.tag == 0 || r.tag >= static_cast<uint32_t>(kern::kWaitProbeSlots)) continue;
    auto it = by_grid.find(r.grid);
    if (it == by_grid.end()) continue;
    it->second.mark_last[r.tag] = std::max(it->second.mark_last[r.tag], r.exit_ns);
    if (const int side = side_of(r.smid); side >= 0)
      it->second.side_last[side][r.tag] = std::max(it->second.side_last[side][r.tag], r.exit_ns);
  }
  std::vector<Acc> order;
  for (const auto& [grid, a] : by_grid) order.push_back(a);
  std::sort(order.begin(), order.end(), [](const Acc& x, const Acc& y) { return x.first_entry < y.first_entry; });
  auto us = [&](uint64_t t) { return (static_cast<double>(t) - static_cast<double>(t0)) / 1000.0; };
  std::vector<ProbeLaunch> out;
  size_t next_span = 0;
  for (const Acc& a : order) {
    ProbeLaunch l;
    l.blocks = static_cast<int>(a.blocks);
    l.threads = static_cast<int>(a.threads);
    l.records = a.records;
    l.kernel = std::to_string(a.blocks) + "x" + std::to_string(a.threads);
    for (size_t s = next_span; s < spans.size(); ++s)
      if (spans[s].blocks == a.blocks && spans[s].threads == a.threads) {
        l.kernel = spans[s].kernel;
        next_span = s + 1;
        break;
      }
    l.first_entry_us = us(a.first_entry);
    l.last_entry_us = us(a.last_entry);
    l.release_us = us(a.first_exit);
    l.last_exit_us = us(a.last_exit);
    l.late_us = l.last_entry_us - l.release_us;
    l.spread_us = l.last_exit_us - l.release_us;
    for (int k = 1; k < kern::kWaitProbeSlots; ++k)
      if (a.mark_last[k]) l.mark_last_us[k] = us(a.mark_last[k]) - l.release_us;
    for (int side = 0; side < 2; ++side)
      for (int k = 0; k < kern::kWaitProbeSlots; ++k)
        if (a.side_last[side][k]) l.side_last_us[side][k] = us(a.side_last[side][k]) - l.release_us;
    out.push_back(l);
  }
  for (size_t i = 0; i + 1 < out.size(); ++i) out[i].advance_us = out[i + 1].release_us - out[i].release_us;
  return out;
}

std::vector<ProbeSummary> probe_summary(const std::vector<ProbeLaunch>& launches) {
  std::map<std::string, std::vector<const ProbeLaunch*>> by_name;
  for (size_t i = 0; i + 1 < launches.size(); ++i) by_name[launches[i].kernel].push_back(&launches[i]);  // the last has no advance
  std::vector<ProbeSummary> out;
  for (const auto& [name, ls] : by_name) {
    ProbeSummary s;
    s.kernel = name;
    s.count = static_cast<int>(ls.size());
    std::vector<double> adv, late, spread;
    for (const ProbeLaunch* l : ls) {
      s.advance_total_us += l->advance_us;
      adv.push_back(l->advance_us);
      late.push_back(l->late_us);
      spread.push_back(l->spread_us);
    }
    s.advance_median_us = median(adv);
    s.late_median_us = median(late);
    s.spread_median_us = median(spread);
    // The median over the launches that set a mark (< 0: none set it).
    auto median_set = [&](auto mark) {
      std::vector<double> m;
      for (const ProbeLaunch* l : ls)
        if (mark(*l) >= 0) m.push_back(mark(*l));
      return m.empty() ? -1.0 : median(m);
    };
    for (int k = 1; k < kern::kWaitProbeSlots; ++k)
      s.mark_median_us[k] = median_set([k](const ProbeLaunch& l) { return l.mark_last_us[k]; });
    for (int side = 0; side < 2; ++side)
      for (int k = 0; k < kern::kWaitProbeSlots; ++k)
        s.side_median_us[side][k] = median_set([side, k](const ProbeLaunch& l) { return l.side_last_us[side][k]; });
    out.push_back(s);
  }
  std::sort(out.begin(), out.end(),
            [](const ProbeSummary& a, const ProbeSummary& b) { return a.advance_total_us > b.advance_total_us; });
  return out;
}

std::string probe_csv(const std::vector<ProbeLaunch>& launches) {
  std::string s =
      "index,kernel,blocks,threads,records,first_entry_us,last_entry_us,release_us,last_exit_us,late_us,spread_us,"
      "advance_us,input_us,main_us,grid_wait_us,end_us,step1_us,step2_us,step3_us\n";
  char buf[512];
  for (size_t i = 0; i < launches.size(); ++i) {
    const ProbeLaunch& l = launches[i];
    std::snprintf(buf, sizeof buf,
                  "%zu,\"%s\",%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", i,
                  l.kernel.c_str(), l.blocks, l.threads, l.records, l.first_entry_us, l.last_entry_us, l.release_us,
                  l.last_exit_us, l.late_us, l.spread_us, l.advance_us, l.mark_last_us[1], l.mark_last_us[2],
                  l.mark_last_us[3], l.mark_last_us[4], l.mark_last_us[5], l.mark_last_us[6], l.mark_last_us[7]);
    s += buf;
  }
  return s;
}

std::string probe_records_csv(const std::vector<kern::WaitProbeRecord>& records) {
  const uint64_t t0 = probe_t0(records);
  auto us = [&](uint64_t t) { return (static_cast<double>(t) - static_cast<double>(t0)) / 1000.0; };
  std::string s = "grid,block,smid,tag,entry_us,exit_us\n";
  char buf[160];
  for (const kern::WaitProbeRecord& r : records) {
    if (r.grid == 0 || r.tag >= static_cast<uint32_t>(kern::kWaitProbeSlots)) continue;  // a mark slot never set
    std::snprintf(buf, sizeof buf, "%llu,%u,%u,%u,%.3f,%.3f\n", static_cast<unsigned long long>(r.grid), r.block,
                  r.smid, r.tag, r.tag == 0 ? us(r.entry_ns) : 0.0, us(r.exit_ns));
    s += buf;
  }
  return s;
}

}  // namespace rs::bench
