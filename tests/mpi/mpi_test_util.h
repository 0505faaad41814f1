// Helpers of the multi-rank test binary weft_mpi_tests (run under mpirun by CTest).
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace weft::test {

// The world communicator made by main (a duplicate of MPI_COMM_WORLD).
Communicator& mpi_world();

// A fresh communicator over the whole world for one test, so that the leftovers of a failed
// test never match the next test's calls. Timeout 20 s: a test that loses a rank fails with
// a CommTimeout instead of hanging until CTest's timeout.
inline std::unique_ptr<Communicator> fresh_world(const std::string& axis = "world") {
  std::unique_ptr<Communicator> c = mpi_world().split(0, mpi_world().rank(), axis);
  c->set_timeout(std::chrono::seconds(20));
  return c;
}

}  // namespace weft::test
