#include "backend/cuda/kernel_name.h"

#include <cxxabi.h>

#include <cstdlib>

namespace rs::cuda {

std::string short_kernel_name(const char* mangled) {
  if (!mangled) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : mangled;
  std::free(d);
  for (const std::string ns : {"(anonymous namespace)::", "rs::cuda::", "rs::kern::", "rs::"})
    for (size_t p; (p = s.find(ns)) != std::string::npos;) s.erase(p, ns.size());
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  // Drop the parameter list: the '(' matching the final ')' (template arguments hold parentheses
  // too, e.g. "(bool)0").
  if (!s.empty() && s.back() == ')') {
    int depth = 0;
    for (size_t i = s.size(); i-- > 0;) {
      depth += s[i] == ')' ? 1 : s[i] == '(' ? -1 : 0;
      if (depth == 0) {
        s.erase(i);
        break;
      }
    }
  }
  return s;
}

}  // namespace rs::cuda
