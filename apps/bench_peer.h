// `weft bench --peer torch`: weft's training step and the same GPT in PyTorch 2.x
// (bench/nanogpt_peer.py) measured in one run, alternately, with the same shapes and threads,
// each as a child process under OMP_WAIT_POLICY=PASSIVE; a table (or one summary JSON line) of
// the median tokens/s per side and mode, the ratios weft/peer, and the kernels each side used.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace weft {

// The --peer options of `weft bench`.
struct PeerOptions {
  std::string name;                          // --peer: "" (no peer) or "torch"
  std::string python;                        // --peer-python ("": <source>/.venv-peers/bin/python)
  std::string modes = "eager,compile,bf16";  // --peer-modes: of bench/nanogpt_peer.py's modes
  int64_t rounds = 3;                        // --peer-rounds
  double max_seconds = 120;                  // --peer-max-seconds: soft cap on one peer mode's steps
};
void add_peer_options(CLI::App& app, PeerOptions& o);

// What both sides run: `weft bench` with these settings and the peer with the same.
struct PeerShapes {
  std::string model;
  int64_t batch = 8, seq = 256, threads = 2, steps = 10, warmup = 2, head_chunk = 0;
  std::string fp32_kernel;  // weft's fp32 products (--fp32-kernel; "" the default)
  std::string format = "text";
};

// Checks the peer's environment (InputError naming scripts/setup-peers.sh when its Python or
// torch 2.x is missing), then runs `rounds` rounds, the order of the two sides flipping each
// round, and prints the result. RuntimeError (one line) when a run fails. Returns 0.
int run_bench_peer(const PeerOptions& peer, const PeerShapes& shapes);

}  // namespace weft
