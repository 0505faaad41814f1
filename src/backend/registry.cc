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
      // cpu-guarded refusing host access to its device memory, as a GPU does: `--comm mpi` then
      // stages every transfer through host copies, the path `--backend cuda --comm mpi` takes,
      // so that path is checked on any machine (a test and debugging backend, like cpu-guarded).
      {"cpu-guarded-staged",
       [] {
         GuardedOptions o;
         o.host_access = false;
         return make_cpu_guarded_backend(o);
       }},
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

namespace {
BackendFactory find_factory(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& [n, fn] : r.entries) {
    if (n == name) return fn;
  }
  return nullptr;
}
}  // namespace

void check_backend_name(const std::string& name) {
  if (find_factory(name)) return;
  std::string known;
  for (const std::string& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  if (name == "cuda") {
    throw_input("backend 'cuda' is not in this build (known: {}); build weft with -DWEFT_CUDA=ON", known);
  }
  throw_input("unknown backend '{}' (known: {})", name, known);
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  check_backend_name(name);
  return find_factory(name)();
}

}  // namespace weft
