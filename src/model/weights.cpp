#include "model/weights.h"
#include "common/error.h"
// Placeholder definitions so every room links; replaced by issue 2.
namespace rs {
std::vector<TensorInfo> expected_tensors(const ModelSpec&) { throw Error("not built yet"); }
std::vector<TensorInfo> expected_mtp_tensors(const ModelSpec&) { throw Error("not built yet"); }
std::unique_ptr<Weights> Weights::load(const std::string&, const ModelSpec&) { throw Error("not built yet"); }
std::unique_ptr<Weights> Weights::dummy(const ModelSpec&, uint64_t) { throw Error("not built yet"); }
const Tensor& Weights::get(const std::string&) const { throw Error("not built yet"); }
const Tensor* Weights::find(const std::string&) const { return nullptr; }
Weights::~Weights() = default;
}  // namespace rs
