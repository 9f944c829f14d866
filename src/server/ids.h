#pragma once
// Response and tool-call ids: unique per process, not guessable from one another.
#include <string>

namespace rs::server {

// "<prefix>-<16 hex digits>"
std::string random_id(const char* prefix);

}  // namespace rs::server
