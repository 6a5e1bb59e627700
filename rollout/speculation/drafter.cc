// The drafter interface's defaults; see drafter.h.
#include "rollout/speculation/drafter.h"

namespace laminar::rollout {

std::vector<DraftTree> Drafter::ProposeBatch(std::span<const DraftContext> ctxs,
                                             int64_t /*warm_catch_up*/) {
  std::vector<DraftTree> trees;
  trees.reserve(ctxs.size());
  for (const DraftContext& ctx : ctxs)
    trees.push_back(ctx.max_nodes > 0 ? Propose(ctx) : DraftTree{});
  return trees;
}

}  // namespace laminar::rollout
