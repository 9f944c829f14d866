#pragma once
// One token's router folded into the streamed expert launch (expert_stream_route.cuh): what the
// fused router kernels take (moe_router_params.h), handed to the expert launch instead. Plain C++.
#include "kernels/ops/lm_head_params.h"
#include "kernels/ops/moe_router_params.h"

namespace rs::kern {

struct ExpertRouteParams {
  rs::cuda::LmHeadParams lg;    // router weight [experts, hidden] and the fp32 logits [experts] (lg.x unused)
  rs::cuda::MoeRouterParams r;  // selection; block 0 stores topk_ids, topk_weights and margins
  rs::cuda::RouterNormIn norm;  // residual + attention output -> RMSNorm; block 0 stores norm.out
};

}  // namespace rs::kern
