// rackserve generate: one prompt through a backend, greedy or sampled, with optional
// teacher-forced logits written as safetensors.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cli/commands.h"
#include "common/error.h"
#include "model/model_spec.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace rs::cli {

namespace {

struct GenerateArgs {
  std::string model, prompt_ids, prompt, logits_out, load_format = "auto", device = "auto";
  int max_tokens = 16, top_k = 0, threads = 0;
  float temperature = 0.0f, top_p = 1.0f;
  uint64_t seed = 0;
  bool print_ids = false, ignore_eos = false;
};

std::vector<int32_t> parse_ids(const std::string& text, int vocab) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0 || v >= vocab)
      throw Error("--prompt-ids: '" + item + "' is not a token id in [0, " + std::to_string(vocab) + ")");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw Error("--prompt-ids: no ids given");
  return ids;
}

void run_generate(const GenerateArgs& a) {
  using clock = std::chrono::steady_clock;
  if (a.load_format != "auto" && a.load_format != "dummy")
    throw Error("--load-format must be auto or dummy (got '" + a.load_format + "')");
  if (a.prompt_ids.empty() == a.prompt.empty())
    throw Error("give exactly one of --prompt-ids and --prompt");
  if (a.max_tokens < 0) throw Error("--max-tokens must be >= 0");
  ModelSpec spec = load_model_spec(a.model);
  std::unique_ptr<Tokenizer> tok;
  std::vector<int32_t> prompt;
  if (!a.prompt.empty()) {
    if (!Tokenizer::dir_has_tokenizer(a.model))
      throw Error(a.model + ": no tokenizer.json / tokenizer_config.json; use --prompt-ids");
    tok = Tokenizer::from_dir(a.model);
    prompt = tok->encode(a.prompt, /*add_special_tokens=*/true);
    if (prompt.empty()) throw Error("--prompt encodes to no tokens");
    for (int32_t id : prompt)
      if (id >= spec.vocab_size)
        throw Error(a.model + ": the tokenizer produced id " + std::to_string(id) +
                    ", outside the model's vocab_size " + std::to_string(spec.vocab_size));
  } else {
    prompt = parse_ids(a.prompt_ids, spec.vocab_size);
  }

  auto t0 = clock::now();
  BackendOptions opt;
  opt.device = a.device;
  opt.threads = a.threads;
  std::unique_ptr<Weights> weights;
  std::unique_ptr<Backend> backend;
  if (a.load_format == "dummy") {
    backend = make_dummy_backend(spec, a.seed, opt, weights);
  } else {
    weights = Weights::load(a.model, spec);
    backend = make_backend(spec, *weights, opt);
  }
  const int block = 16;
  const int total = static_cast<int>(prompt.size()) + a.max_tokens;
  const int blocks = (total + block - 1) / block + 1;
  if (backend->max_kv_blocks(block, 0) < blocks)
    throw Error("KV cache for " + std::to_string(total) + " tokens does not fit this backend's memory");
  backend->init_kv(KvConfig{block, blocks});
  std::vector<int32_t> table(blocks);
  for (int i = 0; i < blocks; ++i) table[i] = i;
  auto t_loaded = clock::now();

  SamplingParams sp;
  sp.temperature = a.temperature;
  sp.top_k = a.top_k;
  sp.top_p = a.top_p;
  sp.seed = a.seed;
  std::vector<int32_t> out;

  SeqStep step;
  step.seq_id = 1;
  step.tokens = prompt;
  step.block_table = table;
  step.sample = a.max_tokens > 0;
  step.return_logits = !a.logits_out.empty();
  step.sampling = SamplingState{&sp, prompt, {}, 0, {}};  // no guided decoding in generate
  Batch batch;
  batch.seqs.push_back(step);
  std::vector<SeqResult> r = backend->execute(batch);
  auto t_prefill = clock::now();
  if (!a.logits_out.empty()) {
    write_safetensors(a.logits_out, {safetensors_f32("logits", {int64_t(prompt.size()), spec.vocab_size},
                                                     r[0].logits.data())});
  }
  auto is_eos = [&](int32_t id) {
    if (a.ignore_eos) return false;
    for (int e : spec.eos_token_ids) if (e == id) return true;
    return false;
  };
  if (a.max_tokens > 0) out.push_back(r[0].token->id);
  while (static_cast<int>(out.size()) < a.max_tokens && !is_eos(out.back())) {
    SeqStep d;
    d.seq_id = 1;
    d.tokens = std::span<const int32_t>(&out.back(), 1);
    d.start_pos = static_cast<int32_t>(prompt.size() + out.size() - 1);
    d.block_table = table;
    d.sample = true;
    d.sampling = SamplingState{&sp, prompt, out, out.size(), {}};
    Batch b;
    b.seqs.push_back(d);
    out.push_back(backend->execute(b)[0].token->id);
  }
  auto t_end = clock::now();

  if (a.print_ids || !tok) {
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? "," : "", out[i]);
    std::printf("\n");
  }
  if (tok) std::printf("%s\n", tok->decode(out, /*skip_special_tokens=*/true).c_str());
  auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  const double prefill_s = secs(t_prefill - t_loaded), decode_s = secs(t_end - t_prefill);
  std::fprintf(stderr,
               "[%s] load %.2fs; prefill %zu tokens %.3fs (%.1f tok/s); decode %zu tokens %.3fs (%.1f tok/s)\n",
               backend->name().c_str(), secs(t_loaded - t0), prompt.size(), prefill_s,
               prompt.size() / prefill_s, out.size() > 0 ? out.size() - 1 : 0, decode_s,
               out.size() > 1 ? (out.size() - 1) / decode_s : 0.0);
}

}  // namespace

void add_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate tokens for one prompt");
  auto a = std::make_shared<GenerateArgs>();
  cmd->add_option("--model", a->model, "HF model directory")->required();
  auto* ids = cmd->add_option("--prompt-ids", a->prompt_ids, "comma-separated token ids");
  auto* text = cmd->add_option("--prompt", a->prompt, "prompt text (needs the model's tokenizer)");
  ids->excludes(text);
  cmd->add_option("--max-tokens", a->max_tokens, "tokens to generate")->required();
  cmd->add_option("--temperature", a->temperature, "0 (default): greedy");
  cmd->add_option("--top-k", a->top_k, "0: off");
  cmd->add_option("--top-p", a->top_p, "1: off");
  cmd->add_option("--seed", a->seed, "sampling seed (and dummy-weight seed)");
  cmd->add_flag("--print-ids", a->print_ids, "print the generated token ids (comma-separated)");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "keep generating past an EOS token");
  cmd->add_option("--logits-out", a->logits_out,
                  "write teacher-forced prompt logits: safetensors, fp32 'logits' [prompt_len, vocab]");
  cmd->add_option("--load-format", a->load_format, "auto | dummy");
  cmd->add_option("--device", a->device, "auto | cpu | cuda");
  cmd->add_option("--threads", a->threads, "CPU threads (0: all cores)");
  cmd->callback([a] { run_generate(*a); });
}

}  // namespace rs::cli
