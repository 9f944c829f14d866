#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace rs {

namespace {
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(path + ": " + what);
}
[[noreturn]] void fail_tensor(const std::string& path, const std::string& name,
                              const std::string& what) {
  throw Error(path + ": tensor '" + name + "': " + what);
}
}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(path, std::string("cannot stat: ") + std::strerror(e));
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail(path, "truncated file: " + std::to_string(size) + " bytes, no header length");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) fail(path, std::string("cannot mmap: ") + std::strerror(errno));
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile);
  f->path_ = path;
  f->map_ = map;
  f->map_size_ = size;

  const auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes || header_len > size - 8)
    fail(path, "bad header: header length " + std::to_string(header_len) +
                   " exceeds the file (" + std::to_string(size) + " bytes): truncated or not safetensors");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("bad header: not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) fail(path, "bad header: not a JSON object");
  const uint8_t* data_start = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const nlohmann::json& v = it.value();
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      fail_tensor(path, name, "bad header entry (needs dtype, shape, data_offsets): " + v.dump());
    SafetensorsEntry e;
    if (!v["dtype"].is_string() || !dtype_from_name(v["dtype"].get<std::string>(), &e.dtype))
      fail_tensor(path, name, "unsupported dtype " + v["dtype"].dump());
    if (!v["shape"].is_array()) fail_tensor(path, name, "bad shape " + v["shape"].dump());
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        fail_tensor(path, name, "bad shape " + v["shape"].dump());
      e.shape.push_back(d.get<int64_t>());
      numel *= static_cast<uint64_t>(d.get<int64_t>());
      if (numel > (1ull << 48)) fail_tensor(path, name, "bad shape " + v["shape"].dump());
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      fail_tensor(path, name, "bad data_offsets " + off.dump());
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end) fail_tensor(path, name, "bad data_offsets " + off.dump());
    if (end > data_size)
      fail_tensor(path, name, "truncated file: data_offsets " + off.dump() + " end past the " +
                                  std::to_string(data_size) + " data bytes present");
    uint64_t want = numel * dtype_size(e.dtype);
    if (end - begin != want)
      fail_tensor(path, name, "size mismatch: " + std::to_string(end - begin) +
                                  " bytes for shape " + v["shape"].dump() + " " +
                                  dtype_name(e.dtype) + " (needs " + std::to_string(want) + ")");
    e.data = data_start + begin;
    e.nbytes = end - begin;
    f->entries_.emplace(name, std::move(e));
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, map_size_);
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const SafetensorsOut& t : tensors) {
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8) h.push_back(' ');  // data aligned to 8 bytes, as HF writes it
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path + ": cannot write");
  uint64_t n = h.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const SafetensorsOut& t : tensors)
    out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  if (!out) throw Error(path + ": write failed");
}

SafetensorsOut safetensors_f32(const std::string& name, std::vector<int64_t> shape,
                               const float* data) {
  SafetensorsOut t{name, DType::F32, std::move(shape), {}};
  size_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<size_t>(d);
  t.bytes.resize(n * 4);
  std::memcpy(t.bytes.data(), data, n * 4);
  return t;
}

}  // namespace rs
