#pragma once
#include <string>

namespace rs {

// The whole file as bytes; rs::Error "PATH: cannot open" when it cannot be read.
std::string read_text_file(const std::string& path);

}  // namespace rs
