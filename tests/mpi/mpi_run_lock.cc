// The run folder's lock on the real world (train/run_lock.h): rank 0 tries the lock and every
// rank learns the outcome, so that a refusal is the same InputError on every rank (none is left
// waiting in a collective), and a granted lock is held by rank 0 alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "mpi_test_util.h"
#include "train/run_lock.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

// A fresh folder made by rank 0, its path and rank 0's pid known to every rank.
std::string shared_folder(Communicator& world, int64_t& rank0_pid) {
  std::string path(256, '\0');
  int64_t head[2] = {0, static_cast<int64_t>(::getpid())};
  if (world.rank() == 0) {
    std::string templ = (fs::temp_directory_path() / "weft-mpi-run-lock-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) templ.clear();
    head[0] = static_cast<int64_t>(templ.size());
    path = templ;
  }
  world.broadcast(head, 2, CommDType::kI64, 0);
  path.resize(static_cast<size_t>(head[0]));
  world.broadcast(path.data(), head[0], CommDType::kU8, 0);
  rank0_pid = head[1];
  return path;
}

TEST(MpiRunLock, EveryRankLearnsTheRefusal) {
  auto world = test::fresh_world();
  int64_t rank0_pid = 0;
  const std::string dir = shared_folder(*world, rank0_pid);
  ASSERT_FALSE(dir.empty());
  const std::string run = dir + "/run";
  RunLock other;  // another run's lock, held by rank 0's process
  if (world->rank() == 0) other = RunLock::acquire(run);
  world->barrier();
  try {
    RunLock mine = lock_run_folder(run, *world);
    ADD_FAILURE() << "rank " << world->rank() << " was granted a held lock";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("run folder {} is in use: pid {} on ", run, rank0_pid)),
              std::string::npos) << "rank " << world->rank() << ": " << e.what();
  }
  world->barrier();
  if (world->rank() == 0) other.release();
  {
    RunLock mine = lock_run_folder(run, *world);
    EXPECT_EQ(mine.held(), world->rank() == 0) << "rank " << world->rank();
    world->barrier();  // every rank has checked before rank 0 lets go
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace weft
