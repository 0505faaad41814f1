// Activation recompute modes (Korthikanti et al. 2022, "Reducing Activation Recomputation in
// Large Transformer Models"): what a layer does not stash for the backward pass it computes
// again. The model (gpt.h) implements them; the planner (src/plan) prices them.
//   kNone       every intermediate is stashed
//   kSelective  the attention core (scores, softmax, the product with V) is recomputed from
//               the stashed q, k, v: the B*NH*T*T probabilities are not stashed (sec. 4.2)
//   kFull       only the layer's output (= the next layer's input) is stashed; the backward
//               pass runs the layer's forward again (sec. 3)
#pragma once
#include <string>

namespace weft {

enum class Recompute { kNone, kSelective, kFull };
Recompute parse_recompute(const std::string& name);  // "none", "selective", "full"; InputError otherwise
const char* recompute_name(Recompute r);

}  // namespace weft
