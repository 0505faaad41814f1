// A micro-batch's host payload, opaque to the engine (issue 31's shape-free batch): a data
// source appends samples to it, the model of its family reads it, and the engine only counts
// its samples and its weight.
//
// The weight is the number of positions the loss averages over (a GPT's tokens, ClimaX's
// patches, a graph network's nodes or graphs). The engine divides the step's summed loss by the
// sum of the weights of the whole global batch, summed over the data-parallel ranks: weights are
// integers, so that sum is exact and the same whatever the layout, and a batch whose samples
// hold different numbers of positions still gives layout-invariant losses.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace weft {

class HostBatch {
 public:
  virtual ~HostBatch() = default;
  // The kind of payload ("tokens", "fields", ...): the family's data source, for messages.
  virtual const char* kind() const = 0;
  // Empties it, keeping its capacity.
  virtual void clear() = 0;
  virtual int64_t samples() const = 0;
  // The positions the loss of its samples averages over.
  virtual int64_t weight() const = 0;
  // A loss of several terms, each averaged over its own count (a graph network's forces over
  // atoms, its energy over graphs): the counts of its samples, one per term, the first weight().
  // The engine sums them over the global batch and gives the totals to the model
  // (Model::set_term_totals). Default: one term; a kind with a fixed_weight() has one term.
  virtual std::vector<int64_t> term_weights() const { return {weight()}; }
  // The weight of every sample when the kind fixes it (tokens: the sequence length), else 0:
  // the engine then reads each micro-batch's weight before the step's first backward.
  virtual int64_t fixed_weight() const { return 0; }
  // Whether a data source may put any number of samples into a fill of rows [first, first +
  // count): one that deals its samples to ranks itself (graphs balanced by cost, whose shares
  // differ in count); otherwise the engine checks that the fill holds `count` samples.
  virtual bool variable_samples() const { return false; }
};

// `b` as the kind K (a family's or a data source's own batch); InputError naming both kinds when
// it holds another payload.
[[noreturn]] void refuse_batch_kind(const HostBatch& b, const char* wanted);
template <typename K>
K& batch_as(HostBatch& b, const char* wanted) {
  auto* k = dynamic_cast<K*>(&b);
  if (k == nullptr) refuse_batch_kind(b, wanted);
  return *k;
}
template <typename K>
const K& batch_as(const HostBatch& b, const char* wanted) {
  return batch_as<K>(const_cast<HostBatch&>(b), wanted);
}

// Appends rows [first, first + count) of the step's global batch (or of an evaluation's rows)
// to `out`.
using BatchFn = std::function<void(int64_t first, int64_t count, HostBatch& out)>;

}  // namespace weft
