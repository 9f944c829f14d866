// Broken checkpoints: each gets one line naming the file, the tensor and what is wrong.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "common/error.h"
#include "model/model_spec.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& name) { return std::string(RS_FIXTURES_DIR) + "/models/" + name; }

std::vector<rs::SafetensorsOut> read_all(const std::string& path) {
  auto f = rs::SafetensorsFile::open(path);
  std::vector<rs::SafetensorsOut> out;
  for (const auto& [name, e] : f->entries()) {
    rs::SafetensorsOut t{name, e.dtype, e.shape, {}};
    const auto* p = static_cast<const uint8_t*>(e.data);
    t.bytes.assign(p, p + e.nbytes);
    out.push_back(std::move(t));
  }
  return out;
}

// A scratch model dir: the fixture's config and tensors, changed by `mutate`.
struct ScratchModel {
  std::string dir;
  explicit ScratchModel(const std::string& src,
                        const std::function<void(std::vector<rs::SafetensorsOut>&)>& mutate = {},
                        const std::string& config_text = "") {
    static int counter = 0;
    dir = (fs::temp_directory_path() / ("rs_ckpt_" + std::to_string(getpid()) + "_" + std::to_string(counter++))).string();
    fs::create_directories(dir);
    if (config_text.empty()) fs::copy_file(fixture(src) + "/config.json", dir + "/config.json");
    else std::ofstream(dir + "/config.json") << config_text;
    auto tensors = read_all(fixture(src) + "/model.safetensors");
    if (mutate) mutate(tensors);
    rs::write_safetensors(dir + "/model.safetensors", tensors);
  }
  ~ScratchModel() { fs::remove_all(dir); }
  std::string st() const { return dir + "/model.safetensors"; }
};

rs::SafetensorsOut* find(std::vector<rs::SafetensorsOut>& v, const std::string& name) {
  for (auto& t : v) if (t.name == name) return &t;
  FAIL("no tensor " << name);
  return nullptr;
}

// Loads and returns the error text ("" if it loaded).
std::string load_error(const std::string& dir) {
  try {
    rs::ModelSpec spec = rs::load_model_spec(dir);
    rs::Weights::load(dir, spec);
  } catch (const rs::Error& e) {
    return e.what();
  }
  return "";
}

void check_one_line(const std::string& err, const std::vector<std::string>& parts) {
  CAPTURE(err);
  REQUIRE(!err.empty());
  CHECK(err.find('\n') == std::string::npos);
  for (const std::string& p : parts) CHECK_MESSAGE(err.find(p) != std::string::npos, "missing '" << p << "'");
}

const std::string kGate = "model.layers.1.mlp.gate.weight";

}  // namespace

TEST_SUITE("unit.model") {
TEST_CASE("an intact copy loads") {
  ScratchModel m("tiny-v3");
  CHECK(load_error(m.dir) == "");
}

TEST_CASE("missing tensor") {
  ScratchModel m("tiny-v3", [](auto& v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](auto& t) { return t.name == kGate; }), v.end());
  });
  check_one_line(load_error(m.dir), {m.st(), kGate, "missing"});
}

TEST_CASE("wrong shape") {
  ScratchModel m("tiny-v3", [](auto& v) { find(v, kGate)->shape = {256, 16}; });
  check_one_line(load_error(m.dir), {m.st(), kGate, "shape [256, 16]", "expected [16, 256]"});
}

TEST_CASE("wrong dtype") {
  const std::string norm = "model.layers.0.input_layernorm.weight";
  ScratchModel m("tiny-v3", [&](auto& v) {
    auto* t = find(v, norm);
    t->dtype = rs::DType::I32;
    t->bytes.resize(256 * 4);
  });
  check_one_line(load_error(m.dir), {m.st(), norm, "dtype I32"});
}

TEST_CASE("FP8 weight without its block scales") {
  const std::string w = "model.layers.0.self_attn.q_a_proj.weight";
  ScratchModel m("tiny-v3-fp8", [&](auto& v) {
    v.erase(std::remove_if(v.begin(), v.end(), [&](auto& t) { return t.name == w + "_scale_inv"; }), v.end());
  });
  check_one_line(load_error(m.dir), {m.st(), w + "_scale_inv", "missing"});
}

TEST_CASE("FP8 block scales of the wrong shape") {
  const std::string s = "model.layers.0.self_attn.kv_b_proj.weight_scale_inv";  // [2, 1] for [256, 64]
  ScratchModel m("tiny-v3-fp8", [&](auto& v) { find(v, s)->shape = {1, 2}; });
  check_one_line(load_error(m.dir), {m.st(), s, "shape [1, 2]", "expected [2, 1]"});
}

TEST_CASE("truncated file") {
  ScratchModel m("tiny-v3");
  auto size = fs::file_size(m.st());
  fs::resize_file(m.st(), size - 1000);
  std::string err = load_error(m.dir);
  check_one_line(err, {m.st(), "truncated"});
  CHECK(err.find("tensor '") != std::string::npos);  // names the first tensor past the end
}

TEST_CASE("file shorter than its header length") {
  ScratchModel m("tiny-v3");
  fs::resize_file(m.st(), 100);
  check_one_line(load_error(m.dir), {m.st(), "bad header"});
}

TEST_CASE("bad header JSON") {
  ScratchModel m("tiny-v3");
  {
    std::fstream f(m.st(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("{\"x\": [1,", 9);
  }
  check_one_line(load_error(m.dir), {m.st(), "bad header", "JSON"});
}

TEST_CASE("header entry with offsets that disagree with its shape") {
  // write_safetensors derives offsets from the bytes: give a tensor too few bytes for its shape.
  ScratchModel m("tiny-v3", [](auto& v) { find(v, kGate)->bytes.resize(100); });
  check_one_line(load_error(m.dir), {m.st(), kGate, "size mismatch"});
}

TEST_CASE("unknown model_type") {
  ScratchModel m("tiny-v3", {}, R"({"model_type": "llama", "vocab_size": 10})");
  check_one_line(load_error(m.dir), {m.dir + "/config.json", "model_type", "llama"});
}

TEST_CASE("unsupported field values") {
  std::ifstream in(fixture("tiny-v3") + "/config.json");
  std::string cfg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string c = cfg;
    auto p = c.find(from);
    REQUIRE(p != std::string::npos);
    c.replace(p, from.size(), to);
    return c;
  };
  struct Case { std::string from, to, field; };
  for (const Case& k : std::vector<Case>{
           {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act"},
           {"\"n_group\": 4", "\"n_group\": 3", "n_group"},
           {"\"topk_group\": 2", "\"topk_group\": 9", "topk_group"},
           {"\"rope_type\": \"yarn\"", "\"rope_type\": \"longrope\"", "rope_parameters.type"},
           {"\"kv_lora_rank\": 64", "\"kv_lora_rank\": \"big\"", "kv_lora_rank"},
           {"\"model_type\": \"deepseek_v3\",", "\"model_type\": \"deepseek_v3\", \"scoring_func\": \"relu\",", "scoring_func"},
           {"\"model_type\": \"deepseek_v3\",", "\"model_type\": \"deepseek_v3\", \"topk_method\": \"random\",", "topk_method"},
           {"\"vocab_size\": 512", "\"vocab_size\": 0", "vocab_size"},
       }) {
    ScratchModel m("tiny-v3", {}, with(k.from, k.to));
    check_one_line(load_error(m.dir), {m.dir + "/config.json", "'" + k.field + "'"});
  }
}

TEST_CASE("a missing config field is named") {
  ScratchModel m("tiny-v3", {}, R"({"model_type": "deepseek_v3", "vocab_size": 10})");
  check_one_line(load_error(m.dir), {"config.json", "'hidden_size'", "missing"});
}

TEST_CASE("no checkpoint at all") {
  ScratchModel m("tiny-v3");
  fs::remove(m.st());
  check_one_line(load_error(m.dir), {m.dir, "no model.safetensors"});
}

TEST_CASE("sharded checkpoint with index.json loads the same tensors; a wrong index is named") {
  auto all = read_all(fixture("tiny-v3") + "/model.safetensors");
  std::string dir = (fs::temp_directory_path() / ("rs_shard_" + std::to_string(getpid()))).string();
  fs::create_directories(dir);
  fs::copy_file(fixture("tiny-v3") + "/config.json", dir + "/config.json", fs::copy_options::overwrite_existing);
  std::vector<rs::SafetensorsOut> a(all.begin(), all.begin() + all.size() / 2), b(all.begin() + all.size() / 2, all.end());
  rs::write_safetensors(dir + "/model-00001-of-00002.safetensors", a);
  rs::write_safetensors(dir + "/model-00002-of-00002.safetensors", b);
  std::string index = "{\"metadata\": {}, \"weight_map\": {";
  for (size_t i = 0; i < all.size(); ++i)
    index += (i ? "," : "") + std::string("\"") + all[i].name + "\": \"model-0000" +
             (i < a.size() ? "1" : "2") + "-of-00002.safetensors\"";
  index += "}}";
  std::ofstream(dir + "/model.safetensors.index.json") << index;
  {
    rs::ModelSpec spec = rs::load_model_spec(dir);
    auto w = rs::Weights::load(dir, spec);
    auto ref = rs::Weights::load(fixture("tiny-v3"), spec);
    REQUIRE(w->all().size() == ref->all().size());
    for (const auto& [name, t] : ref->all()) {
      const rs::Tensor& u = w->get(name);
      REQUIRE(u.nbytes == t.nbytes);
      CHECK(std::memcmp(u.data, t.data, t.nbytes) == 0);
    }
  }
  // An index that puts a tensor in the wrong shard.
  std::string bad = index;
  auto p = bad.find("\"" + all[0].name + "\": \"model-00001");
  REQUIRE(p != std::string::npos);
  bad.replace(bad.find("00001", p), 5, "00002");
  std::ofstream(dir + "/model.safetensors.index.json", std::ios::trunc) << bad;
  check_one_line(load_error(dir), {"model-00002-of-00002.safetensors", all[0].name, "missing"});
  fs::remove_all(dir);
}

TEST_CASE("weights are memory-mapped, not copied") {
  rs::ModelSpec spec = rs::load_model_spec(fixture("tiny-v3"));
  auto w = rs::Weights::load(fixture("tiny-v3"), spec);
  // The kernel's map of this process says which file backs the bytes a tensor points at.
  auto backing_file = [](const void* p) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    const auto addr = reinterpret_cast<uintptr_t>(p);
    while (std::getline(maps, line)) {
      uintptr_t lo = 0, hi = 0;
      if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
      if (addr >= lo && addr < hi) {
        auto slash = line.find('/');
        return slash == std::string::npos ? std::string() : line.substr(slash);
      }
    }
    return std::string();
  };
  for (const char* name : {"model.embed_tokens.weight", "model.layers.2.mlp.experts.7.up_proj.weight"}) {
    std::string file = backing_file(w->get(name).data);
    CAPTURE(name);
    CHECK(file.size() >= 18);
    CHECK(file.substr(file.size() - 18) == "/model.safetensors");
  }
}

TEST_CASE("MTP weights are recognised when present and optional when absent") {
  rs::ModelSpec spec = rs::load_model_spec(fixture("tiny-v3"));
  REQUIRE(spec.num_nextn_predict_layers == 1);
  auto plain = rs::Weights::load(fixture("tiny-v3"), spec);
  CHECK_FALSE(plain->has_mtp());
  // Add MTP tensors (dummy values) to a copy: now they load and are kept.
  auto dummy = rs::Weights::dummy(spec, 1);
  ScratchModel m("tiny-v3", [&](auto& v) {
    for (const rs::TensorInfo& info : rs::expected_mtp_tensors(spec)) {
      const rs::Tensor& t = dummy->get(info.name);
      rs::SafetensorsOut o{info.name, t.dtype, t.shape, {}};
      o.bytes.assign(static_cast<const uint8_t*>(t.data), static_cast<const uint8_t*>(t.data) + t.nbytes);
      v.push_back(std::move(o));
    }
  });
  auto with = rs::Weights::load(m.dir, spec);
  CHECK(with->has_mtp());
  CHECK(with->find("model.layers.3.eh_proj.weight") != nullptr);
  CHECK(with->find("model.layers.3.mlp.experts.15.down_proj.weight") != nullptr);
}
}
