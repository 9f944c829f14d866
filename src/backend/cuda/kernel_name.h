#pragma once
// Short, readable kernel names for measurement reports (graph ablation, kernel timeline):
// demangled, the project's namespaces and the parameter list dropped, template arguments kept
// (they tell the variants apart).
#include <string>

namespace rs::cuda {

std::string short_kernel_name(const char* mangled);

}  // namespace rs::cuda
