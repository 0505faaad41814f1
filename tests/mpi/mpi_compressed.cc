// Compressed collectives (comm/compressed_comm.h) on real ranks against the uncompressed
// collective of the same data: every codec, all-reduce (sync and async), reduce-scatter with
// uneven and empty blocks, all-gather, point-to-point around a ring, error feedback, the codec
// off (bit for bit the transport's result) and the trace (one event per logical call, raw and
// wire bytes, no transport events underneath). Run under mpirun with 2, 3, 4 and 8 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/registry.h"
#include "comm/codec.h"
#include "comm/compressed_comm.h"
#include "comm/device_comm.h"
#include "comm/tracer.h"
#include "mpi_test_util.h"

namespace weft {
namespace {

const char* kCodecs[] = {"bf16", "fp16", "int8", "int4", "zfp:16", "zstd"};

// Rank r's value at element i, in [-1, 1].
float value(int r, int64_t i) {
  return static_cast<float>(0.7 * std::sin(0.05 * static_cast<double>(i) + 0.9 * r) +
                            0.3 * std::cos(0.003 * static_cast<double>(i * (r + 2))));
}

std::vector<float> local(int r, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = value(r, i);
  return x;
}

// The per-element error a sum over P ranks may carry: each of P contributions coded once
// (e per value) and the reduced chunk coded once more (at most P in magnitude).
double tolerance(const CodecSpec& c, int P) {
  switch (c.kind) {
    case CodecKind::kBf16: return (P + P) * 1.0 * std::ldexp(1.0, -8);
    case CodecKind::kFp16: return (P + P) * 1.0 * std::ldexp(1.0, -11);
    case CodecKind::kInt8: return (P + P) * 1.0 / 127 / 2 + 1e-6;
    case CodecKind::kInt4: return (P + P) * 1.0 / 7 / 2 + 1e-6;
    case CodecKind::kZfp: return (P + P) * 2e-3;
    default: return 1e-5 * P;  // lossless: fp32 summation order only
  }
}

struct Ranks {
  std::unique_ptr<Communicator> world = test::fresh_world("dp");
  std::unique_ptr<Backend> be = make_backend("cpu");
  DeviceCommunicator dev{*world, *be};
};

// Every rank's copy of `x` is the same, bit for bit.
void expect_identical_on_all_ranks(Communicator& c, const std::vector<float>& x, const std::string& what) {
  const int P = c.size();
  std::vector<float> all(x.size() * static_cast<size_t>(P));
  c.all_gather(x.data(), all.data(), static_cast<int64_t>(x.size()), CommDType::kF32);
  for (int q = 1; q < P; ++q)
    ASSERT_EQ(std::memcmp(all.data(), all.data() + x.size() * static_cast<size_t>(q), x.size() * 4), 0)
        << what << ": rank " << q << " differs from rank 0";
}

TEST(MpiCompressed, AllReduceOfEveryCodecMatchesTheSum) {
  Ranks s;
  const int P = s.dev.size(), me = s.dev.rank();
  for (const char* name : kCodecs) {
    const CodecSpec spec = parse_codec(name, "test", 256);
    CompressedComm c(s.dev, make_codec(spec, *s.be, "test"));
    for (int64_t n : {int64_t{1}, int64_t{P - 1}, int64_t{1000}, int64_t{4099}}) {
      std::vector<float> x = local(me, n), ref = x;
      s.dev.all_reduce(ref.data(), n, CommDType::kF32, ReduceOp::kSum);
      for (bool async : {false, true}) {
        std::vector<float> y = x;
        if (async) {
          c.iall_reduce(y.data(), n, CommDType::kF32, ReduceOp::kSum)->wait();
        } else {
          c.all_reduce(y.data(), n, CommDType::kF32, ReduceOp::kSum);
        }
        const double tol = tolerance(spec, P);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_NEAR(y[static_cast<size_t>(i)], ref[static_cast<size_t>(i)], tol) << name << " n=" << n << " i=" << i;
        expect_identical_on_all_ranks(*s.world, y, name);
      }
    }
  }
}

TEST(MpiCompressed, ReduceScatterWithUnevenAndEmptyBlocks) {
  Ranks s;
  const int P = s.dev.size(), me = s.dev.rank();
  std::vector<int64_t> counts(static_cast<size_t>(P));
  for (int q = 0; q < P; ++q) counts[static_cast<size_t>(q)] = q == 1 ? 0 : 37 * (q + 1);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  int64_t off = 0;
  for (int q = 0; q < me; ++q) off += counts[static_cast<size_t>(q)];
  const int64_t mine = counts[static_cast<size_t>(me)];
  for (const char* name : kCodecs) {
    const CodecSpec spec = parse_codec(name, "test", 32);
    CompressedComm c(s.dev, make_codec(spec, *s.be, "test"));
    const std::vector<float> x = local(me, total);
    std::vector<float> ref(static_cast<size_t>(std::max<int64_t>(mine, 1))), y(ref.size());
    s.dev.reduce_scatter_v(x.data(), ref.data(), counts, CommDType::kF32, ReduceOp::kSum);
    c.ireduce_scatter_v(x.data(), y.data(), counts, CommDType::kF32, ReduceOp::kSum)->wait();
    // Only P-1 contributions are coded (this rank's own block stays exact), and no second coding.
    const double tol = tolerance(spec, P) / 2;
    for (int64_t i = 0; i < mine; ++i)
      ASSERT_NEAR(y[static_cast<size_t>(i)], ref[static_cast<size_t>(i)], tol) << name << " i=" << i;
    (void)off;
  }
}

TEST(MpiCompressed, AllGatherDecodesEveryBlockTheSameOnEveryRank) {
  Ranks s;
  const int P = s.dev.size(), me = s.dev.rank();
  std::vector<int64_t> counts(static_cast<size_t>(P));
  for (int q = 0; q < P; ++q) counts[static_cast<size_t>(q)] = 50 + 13 * q;
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  for (const char* name : kCodecs) {
    const CodecSpec spec = parse_codec(name, "test", 16);
    CompressedComm c(s.dev, make_codec(spec, *s.be, "test"));
    const std::vector<float> x = local(me, counts[static_cast<size_t>(me)]);
    std::vector<float> ref(static_cast<size_t>(total)), y(ref.size());
    s.dev.all_gather_v(x.data(), ref.data(), counts, CommDType::kF32);
    c.iall_gather_v(x.data(), y.data(), counts, CommDType::kF32)->wait();
    const double tol = tolerance(spec, 1) / 2;
    for (int64_t i = 0; i < total; ++i)
      ASSERT_NEAR(y[static_cast<size_t>(i)], ref[static_cast<size_t>(i)], tol) << name << " i=" << i;
    if (spec.lossless()) EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0) << name;
    expect_identical_on_all_ranks(*s.world, y, name);
  }
}

TEST(MpiCompressed, PointToPointAroundTheRing) {
  Ranks s;
  const int P = s.dev.size(), me = s.dev.rank();
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  for (const char* name : kCodecs) {
    const CodecSpec spec = parse_codec(name, "test", 64);
    CompressedComm c(s.dev, make_codec(spec, *s.be, "test"));
    const int64_t n = 1234;
    const std::vector<float> x = local(me, n), expect = local(prev, n);
    std::vector<float> y(static_cast<size_t>(n));
    CommHandle r = c.irecv(y.data(), n, CommDType::kF32, prev, 7);
    CommHandle w = c.isend(x.data(), n, CommDType::kF32, next, 7);
    r->wait();
    w->wait();
    const double tol = tolerance(spec, 1) / 2;
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[static_cast<size_t>(i)], expect[static_cast<size_t>(i)], tol) << name;
    // Blocking forms, the other way round, on an even ring (even ranks send first).
    if (P % 2 == 0) {
      std::vector<float> z(static_cast<size_t>(n));
      if (me % 2 == 0) {
        c.send(x.data(), n, CommDType::kF32, prev, 8);
        c.recv(z.data(), n, CommDType::kF32, next, 8);
      } else {
        c.recv(z.data(), n, CommDType::kF32, next, 8);
        c.send(x.data(), n, CommDType::kF32, prev, 8);
      }
      const std::vector<float> from_next = local(next, n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(z[static_cast<size_t>(i)], from_next[static_cast<size_t>(i)], tol) << name;
    }
  }
}

// A 16-bit payload (a 16-bit run's activations, working parameters, pipeline messages) goes
// through the codec widened to fp32, and what arrives is rounded once into the 16-bit buffer:
// bit for bit the fp32 call on the widened values, rounded. Every collective kind, sync and
// async, and point to point; the trace counts the raw bytes at 2 an element.
TEST(MpiCompressed, SixteenBitPayloadsAreTheWidenedCallRounded) {
  Ranks s;
  const int P = s.dev.size(), me = s.dev.rank();
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  Backend& be = *s.be;
  std::vector<int64_t> counts(static_cast<size_t>(P));
  for (int q = 0; q < P; ++q) counts[static_cast<size_t>(q)] = q == 1 ? 0 : 29 * (q + 1);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const int64_t mine = counts[static_cast<size_t>(me)], n = 1001;
  for (const DType dt : {DType::kBF16, DType::kF16}) {
    const CommDType ct = comm_dtype_of(dt);
    // x16: this rank's values rounded to dt; wide(x16) exactly; round(f) of an fp32 result.
    const auto narrow = [&](const std::vector<float>& f) {
      std::vector<uint16_t> h(f.size());
      be.convert(View(h.data(), dt), CView(f.data(), DType::kF32), static_cast<int64_t>(f.size()));
      return h;
    };
    const auto wide = [&](const std::vector<uint16_t>& h) {
      std::vector<float> f(h.size());
      be.convert(View(f.data(), DType::kF32), CView(h.data(), dt), static_cast<int64_t>(h.size()));
      return f;
    };
    for (const char* name : {"int8", "zstd", "bf16"}) {
      const std::string what = fmt::format("{} payload, codec {}", dtype_name(dt), name);
      const CodecSpec spec = parse_codec(name, "test", 64);
      CompressedComm c(s.dev, make_codec(spec, be, "test"));
      // all_reduce, sync and async
      const std::vector<uint16_t> x16 = narrow(local(me, n));
      std::vector<float> ref = wide(x16);
      c.all_reduce(ref.data(), n, CommDType::kF32, ReduceOp::kSum);
      for (bool async : {false, true}) {
        std::vector<uint16_t> y = x16;
        if (async) {
          c.iall_reduce(y.data(), n, ct, ReduceOp::kSum)->wait();
        } else {
          c.all_reduce(y.data(), n, ct, ReduceOp::kSum);
        }
        EXPECT_EQ(y, narrow(ref)) << what << " all_reduce async " << async;
      }
      // reduce_scatter_v with uneven and empty blocks
      const std::vector<uint16_t> xs = narrow(local(me, total));
      std::vector<float> rs_ref(static_cast<size_t>(std::max<int64_t>(mine, 1)));
      c.reduce_scatter_v(wide(xs).data(), rs_ref.data(), counts, CommDType::kF32, ReduceOp::kSum);
      std::vector<uint16_t> rs(rs_ref.size());
      c.ireduce_scatter_v(xs.data(), rs.data(), counts, ct, ReduceOp::kSum)->wait();
      rs_ref.resize(static_cast<size_t>(mine));
      rs.resize(static_cast<size_t>(mine));
      EXPECT_EQ(rs, narrow(rs_ref)) << what << " reduce_scatter_v";
      // all_gather_v
      const std::vector<uint16_t> xg = narrow(local(me, mine));
      std::vector<float> ag_ref(static_cast<size_t>(total));
      c.all_gather_v(wide(xg).data(), ag_ref.data(), counts, CommDType::kF32);
      std::vector<uint16_t> ag(static_cast<size_t>(total));
      c.all_gather_v(xg.data(), ag.data(), counts, ct);
      EXPECT_EQ(ag, narrow(ag_ref)) << what << " all_gather_v";
      // around the ring: what arrives is the sender's values through the codec, rounded
      std::vector<uint16_t> got(static_cast<size_t>(n));
      std::vector<float> got32(static_cast<size_t>(n));
      CommHandle r = c.irecv(got.data(), n, ct, prev, 9);
      CommHandle w = c.isend(x16.data(), n, ct, next, 9);
      r->wait();
      w->wait();
      const std::vector<float> x32 = wide(x16);
      r = c.irecv(got32.data(), n, CommDType::kF32, prev, 10);
      w = c.isend(x32.data(), n, CommDType::kF32, next, 10);
      r->wait();
      w->wait();
      EXPECT_EQ(got, narrow(got32)) << what << " send/recv";
      if (spec.lossless()) EXPECT_EQ(wide(got), wide(narrow(local(prev, n)))) << what;
    }
    // The trace: one event, raw bytes at the payload's 2 an element.
    Tracer t;
    t.set_enabled(true);
    CompressedComm c(s.dev, make_codec(parse_codec("int8", "test", 64), be, "test"));
    s.dev.set_tracer(&t);
    std::vector<uint16_t> y = narrow(local(me, n));
    c.all_reduce(y.data(), n, ct, ReduceOp::kSum);
    s.dev.set_tracer(nullptr);
    ASSERT_EQ(t.events().size(), 1u);
    EXPECT_EQ(t.events()[0].bytes, 2 * n);
  }
}

TEST(MpiCompressed, OffPassesThroughBitForBit) {
  Ranks s;
  const int me = s.dev.rank();
  CompressedComm c(s.dev, nullptr);
  std::vector<float> x = local(me, 999), a = x, b = x;
  s.dev.all_reduce(a.data(), 999, CommDType::kF32, ReduceOp::kSum);
  c.all_reduce(b.data(), 999, CommDType::kF32, ReduceOp::kSum);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  // Max reductions and other dtypes pass through even with a codec.
  CompressedComm q(s.dev, make_codec(parse_codec("int4", "t"), *s.be, "t"));
  std::vector<float> m = x, m2 = x;
  s.dev.all_reduce(m.data(), 999, CommDType::kF32, ReduceOp::kMax);
  q.all_reduce(m2.data(), 999, CommDType::kF32, ReduceOp::kMax);
  EXPECT_EQ(m, m2);
  double d = me + 0.25, d2 = d;
  s.dev.all_reduce(&d, 1, CommDType::kF64, ReduceOp::kSum);
  q.all_reduce(&d2, 1, CommDType::kF64, ReduceOp::kSum);
  EXPECT_EQ(d, d2);
}

// With error feedback the average over steps of the compressed sums approaches the exact sum
// (each step's loss is sent in the next); without, int4's error repeats every step.
TEST(MpiCompressed, ErrorFeedbackAveragesTheErrorAway) {
  Ranks s;
  const int P = s.dev.size(), me = s.dev.rank();
  const int64_t n = 2048;
  const CodecSpec spec = parse_codec("int4", "test", 128);
  CompressedComm c(s.dev, make_codec(spec, *s.be, "test"));
  const std::vector<float> x = local(me, n);
  std::vector<float> ref = x;
  s.dev.all_reduce(ref.data(), n, CommDType::kF32, ReduceOp::kSum);
  std::vector<int64_t> counts(static_cast<size_t>(P), n / P);
  counts.back() += n % P;
  std::vector<float> residual(static_cast<size_t>(n), 0.0f);
  const int K = 24;
  std::vector<double> with(static_cast<size_t>(n), 0.0), without(static_cast<size_t>(n), 0.0);
  int64_t off = 0;
  for (int q = 0; q < s.dev.rank(); ++q) off += counts[static_cast<size_t>(q)];
  const int64_t mine = counts[static_cast<size_t>(me)];
  std::vector<float> y(static_cast<size_t>(mine));
  for (int k = 0; k < K; ++k) {
    c.set_next_residual(residual.data());
    c.reduce_scatter_v(x.data(), y.data(), counts, CommDType::kF32, ReduceOp::kSum);
    for (int64_t i = 0; i < mine; ++i) with[static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
    c.reduce_scatter_v(x.data(), y.data(), counts, CommDType::kF32, ReduceOp::kSum);
    for (int64_t i = 0; i < mine; ++i) without[static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
  }
  double e_with = 0, e_without = 0;
  for (int64_t i = 0; i < mine; ++i) {
    const double r = ref[static_cast<size_t>(off + i)];
    e_with = std::max(e_with, std::fabs(with[static_cast<size_t>(i)] / K - r));
    e_without = std::max(e_without, std::fabs(without[static_cast<size_t>(i)] / K - r));
  }
  if (mine > 0) {
    EXPECT_LT(e_with, e_without / 4) << "with " << e_with << " without " << e_without;
  }
}

TEST(MpiCompressed, TraceHasOneEventPerLogicalCallWithWireBytes) {
  Ranks s;
  Tracer tracer;
  s.dev.set_tracer(&tracer);
  const int P = s.dev.size(), me = s.dev.rank();
  CompressedComm c(s.dev, make_codec(parse_codec("int8", "t", 256), *s.be, "t"));
  const int64_t n = 4096;
  std::vector<float> x = local(me, n);
  c.all_reduce(x.data(), n, CommDType::kF32, ReduceOp::kSum);
  std::vector<float> g(static_cast<size_t>(n) * P);
  c.all_gather(x.data(), g.data(), n, CommDType::kF32);
  s.dev.set_tracer(nullptr);
  ASSERT_EQ(tracer.events().size(), 2u);
  const TraceEvent& ar = tracer.events()[0];
  EXPECT_EQ(ar.kind, "all_reduce");
  EXPECT_EQ(ar.axis, "dp");
  EXPECT_EQ(ar.bytes, n * 4);
  EXPECT_EQ(ar.codec, "int8");
  EXPECT_GT(ar.wire_bytes, 0);
  EXPECT_LT(ar.wire_bytes, n * 4 * 0.3);
  EXPECT_GT(ar.rel_err, 0.0);
  EXPECT_LT(ar.rel_err, 0.02);
  EXPECT_GE(ar.codec_s, 0.0);
  const TraceEvent& ag = tracer.events()[1];
  EXPECT_EQ(ag.kind, "all_gather");
  EXPECT_EQ(ag.bytes, n * 4 * P);
  EXPECT_EQ(ag.wire_bytes, codec_wire_bytes(parse_codec("int8", "t", 256), n) * P);
}

}  // namespace
}  // namespace weft
