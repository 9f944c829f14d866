#include "backend/sampling.h"
#include "common/error.h"
// Placeholder definitions so every room links; replaced by issue 2.
namespace rs {
SampledToken sample_token(std::span<const float>, const SamplingState&) { throw Error("not built yet"); }
float sampling_uniform(uint64_t, uint64_t) { throw Error("not built yet"); }
}  // namespace rs
