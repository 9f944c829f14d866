#include "common/read_file.h"

#include <fstream>
#include <sstream>

#include "common/error.h"

namespace rs {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace rs
