// Backends by name (backend/registry.h): the built-in names make backends of that name; an
// unknown name is one InputError naming the known ones, from the registry and from a run
// config's validation alike, before anything is created.
#include <gtest/gtest.h>

#include "backend/registry.h"
#include "core/error.h"
#include "train/config.h"

namespace weft {
namespace {

TEST(BackendRegistry, BuiltInNamesMakeTheirBackends) {
  for (const char* name : {"cpu", "cpu-guarded"}) {
    EXPECT_NO_THROW(check_backend_name(name)) << name;
    EXPECT_EQ(make_backend(name)->name(), name);
  }
}

TEST(BackendRegistry, UnknownNamesAreOneClearInputError) {
  for (const std::string& bad : {std::string("gpu"), std::string("")}) {
    try {
      make_backend(bad);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("unknown backend '" + bad + "' (known: cpu, cpu-guarded"),
                std::string::npos)
          << e.what();
    }
  }
  RunConfig cfg;
  cfg.backend = "gpu";
  EXPECT_THROW(cfg.validate(), InputError);
}

}  // namespace
}  // namespace weft
