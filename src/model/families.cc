// The registered model families (model/family.h), one line each; the first is the default of a
// ModelConfig. Adding a family: its folder src/model/<family>/ with a function returning its
// Family object, and one line here (a test or a plug-in may also call register_family).
#include "model/climax/climax_config.h"
#include "core/error.h"
#include "model/family.h"
#include "model/gnn/gnn_config.h"
#include "model/gpt/gpt_config.h"

namespace weft {

namespace {
std::vector<const Family*>& registry() {
  static std::vector<const Family*> families = {&gpt_family(), &climax_family(), &gnn_family()};
  return families;
}
}  // namespace

std::span<const Family* const> registered_families() { return registry(); }

void register_family(const Family& family) {
  for (const Family* f : registry()) {
    if (f == &family) return;
    if (std::string_view(f->name()) == family.name()) {
      throw_input("a model family named '{}' is registered already", family.name());
    }
  }
  registry().push_back(&family);
}

}  // namespace weft
