// Backends by name: what `--backend` and `[run] backend` select. "cpu" and "cpu-guarded" are
// always there; a backend built as a separate library (cuda: weft_cuda, only with
// -DWEFT_CUDA=ON) is added by the program that links it, explicitly, before the first
// make_backend (apps/weft.cc calls register_backend("cuda", ...) under WEFT_HAVE_CUDA): no
// static-initialisation tricks that a static library's linker would drop.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace weft {

using BackendFactory = std::function<std::unique_ptr<Backend>()>;

// Adds (or replaces) the backend `name`.
void register_backend(const std::string& name, BackendFactory factory);
// The names make_backend accepts, in registration order (cpu, cpu-guarded first).
std::vector<std::string> backend_names();
// InputError naming the known backends unless `name` is one (and saying that cuda needs a
// build with -DWEFT_CUDA=ON when it is asked for and absent). Creates nothing.
void check_backend_name(const std::string& name);
// A new backend of that name; check_backend_name's InputError otherwise.
std::unique_ptr<Backend> make_backend(const std::string& name);

}  // namespace weft
