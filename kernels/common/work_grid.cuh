#pragma once
// Which share of an op's work a block takes. An op launched as its own kernel shares its work
// over the launch grid; inside the decode megakernel (kernels/mega/) the same op runs on the
// persistent CTAs, whose count and index are the megakernel's, not an op grid's.
namespace rs::kern {

struct WorkGrid {
  int index;  // this block's share
  int count;  // shares
};

__device__ __forceinline__ WorkGrid launch_work_grid() {
  return WorkGrid{static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x)};
}

}  // namespace rs::kern
