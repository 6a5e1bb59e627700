// BpeMergeSymbols: a min-heap of candidate pairs over a doubly linked list of symbols; stale heap
// entries (a side already merged away) are skipped when popped.
#include "model/tokenizer/bpe_merge.h"

#include <queue>

namespace laminar::model {

namespace {

struct Candidate {
  double priority;
  int32_t left;   // index of the left symbol
  int32_t right;  // index of the right symbol
  int32_t left_id;
  int32_t right_id;
};

struct Worse {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.left > b.left;
  }
};

}  // namespace

void BpeMergeSymbols(const BpePairTable& table, std::vector<BpeSymbol>* symbols) {
  auto& sym = *symbols;
  const auto n = static_cast<int32_t>(sym.size());
  if (n < 2) return;
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, Worse> heap;
  auto push = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    if (const auto* m = table.Find(sym[left].id, sym[right].id)) {
      heap.push({m->priority, left, right, sym[left].id, sym[right].id});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right ||
        sym[c.left].id != c.left_id || sym[c.right].id != c.right_id) {
      continue;  // stale
    }
    const auto* m = table.Find(c.left_id, c.right_id);
    sym[c.left].id = m->result;
    sym[c.left].length += sym[c.right].length;
    alive[c.right] = false;
    next[c.left] = next[c.right];
    if (next[c.left] >= 0) prev[next[c.left]] = c.left;
    push(prev[c.left], c.left);
    push(c.left, next[c.left]);
  }
  std::vector<BpeSymbol> out;
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
  sym = std::move(out);
}

}  // namespace laminar::model
