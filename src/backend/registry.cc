#include "backend/registry.h"

#include <mutex>
#include <utility>

#include "backend/cpu_guarded/guarded_backend.h"
#include "core/error.h"

namespace weft {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::pair<std::string, BackendFactory>> entries{
      {"cpu", [] { return make_cpu_backend(); }},
      {"cpu-guarded", [] { return make_cpu_guarded_backend(); }},
  };
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& [n, f] : r.entries) {
    if (n == name) {
      f = std::move(factory);
      return;
    }
  }
  r.entries.emplace_back(name, std::move(factory));
}

std::vector<std::string> backend_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& e : r.entries) names.push_back(e.first);
  return names;
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  BackendFactory f;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& [n, fn] : r.entries) {
      if (n == name) f = fn;
    }
  }
  if (!f) {
    std::string known;
    for (const std::string& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
    if (name == "cuda") {
      throw_input("backend 'cuda' is not in this build (known: {}); build weft with -DWEFT_CUDA=ON", known);
    }
    throw_input("unknown backend '{}' (known: {})", name, known);
  }
  return f();
}

}  // namespace weft
