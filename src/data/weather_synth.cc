#include "data/weather_synth.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <complex>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"

namespace weft {

namespace fs = std::filesystem;

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kDeg = kPi / 180.0;
constexpr double kRadius = 6.371e6;    // a, m
constexpr double kOmega = 7.292e-5;    // Earth's rotation, rad/s
constexpr double kGravity = 9.80665;   // m/s^2
constexpr double kYearDays = 365.25;
constexpr double kObliquity = 23.44 * kDeg;

// Philox streams of the generator (the seed is the user's; streams only separate the draws).
constexpr uint64_t kStreamWaves = 0x5745415448455231ull;  // "WEATHER1": wave forcing
constexpr uint64_t kStreamNoise = 0x5745415448455232ull;  // "WEATHER2": t2m noise

// ---- tunable physics (docs/formats-weather.md lists them) ----
constexpr double kZ0 = 5870.0 * kGravity;  // z500 at the equator, m^2/s^2
constexpr double kJetSpeed = 23.0;         // m/s, annual mean of each hemisphere's jet
constexpr double kJetSeason = 8.0;         // m/s weaker in summer, stronger in winter
constexpr double kJetLat = 42.0;           // degrees, annual mean
constexpr double kJetLatSeason = 6.0;      // degrees poleward in summer
constexpr double kJetWidth = 12.0;         // degrees (Gaussian)
constexpr double kTropEasterly = 4.0;      // m/s at 500 hPa over the equator
constexpr double kWaveRefWind = 18.0;      // m/s at 45 degrees: the solid-body rotation of the wave dispersion
constexpr double kWaveAmp = 1600.0;        // m^2/s^2, RMS of the Rossby waves before the envelope
constexpr double kForceTime = 3.0 * 86400.0;  // s, correlation time of the waves' red-noise forcing
constexpr int kWaveNMin = 4, kWaveNMax = 14, kWaveMMax = 8;
constexpr double kT850Eq = 291.0, kT850Pole = 44.0, kT850Season = 10.0, kT850LandSeason = 10.0;  // K
constexpr double kT850Relax = 8.0 * 86400.0;  // s
constexpr double kDiffusivity = 1.0e5;        // m^2/s
constexpr double kWind850 = 0.6;              // advecting wind at 850 hPa / wind at 500 hPa
constexpr double kLapse = 9.75;               // K, t2m - t850 for 1.5 km at 6.5 K/km
constexpr double kDiurnalOcean = 4.0, kDiurnalLand = 14.0;  // K per unit of cos(zenith) above its daily mean
constexpr double kTauLand = 5.0 * 3600.0, kTauOcean = 36.0 * 3600.0;  // t2m response time, s
constexpr double kT2mNoise = 0.15;            // K per output step
constexpr double kSurfaceWind = 0.45;         // 10 m wind / geostrophic wind
constexpr double kTurning = 20.0 * kDeg;      // cross-isobar turning towards low geopotential
constexpr double kTrade = 6.0, kTradeMeridional = 4.0, kTradeWidth = 15.0;  // m/s, m/s, degrees
constexpr double kSeasonLagDays = 30.0;       // lag of the seasonal circulation behind the sun

// Days since 2000-01-01 00:00 -> solar declination (rad) and seasonal factor s in [-1, 1]
// (+1 in northern summer, lagging the sun by kSeasonLagDays).
double declination(double day) { return -kObliquity * std::cos(2 * kPi * (day + 10.0) / kYearDays); }
double season(double day) { return -std::cos(2 * kPi * (day + 10.0 - kSeasonLagDays) / kYearDays); }

// Zonal wind of the 500 hPa background at latitude phi (rad) in season s: two jets + easterlies.
double background_wind(double phi, double s) {
  const double lat = phi / kDeg;
  double u = -kTropEasterly * std::exp(-(lat / 12.0) * (lat / 12.0));
  for (int h : {1, -1}) {
    const double sh = h * s;  // summer factor of the hemisphere
    const double speed = kJetSpeed - kJetSeason * sh, centre = h * (kJetLat + kJetLatSeason * sh);
    const double x = (lat - centre) / kJetWidth;
    u += speed * std::exp(-x * x);
  }
  return u;
}

// Gradient-wind balance on the sphere: dPhi/dphi = -(a f U + U^2 tan phi), integrated from the
// equator (Simpson's rule, 64 intervals).
double background_geopotential(double phi, double s) {
  auto dz = [s](double p) {
    const double u = background_wind(p, s);
    return -(kRadius * 2 * kOmega * std::sin(p) * u + u * u * std::tan(p));
  };
  constexpr int kN = 64;
  const double h = phi / kN;
  double acc = dz(0) + dz(phi);
  for (int k = 1; k < kN; ++k) acc += (k % 2 ? 4.0 : 2.0) * dz(k * h);
  return kZ0 + acc * h / 3.0;
}

// Fully normalised associated Legendre functions (geodesy's 4 pi normalisation: the mean of
// (Pbar_nm(sin phi) cos m lambda)^2 over the sphere is 1 for m > 0) at x = sin phi, for
// n <= nmax: p[n * (nmax + 1) + m].
std::vector<double> legendre(int nmax, double x) {
  const double c = std::sqrt(std::max(0.0, 1 - x * x));
  const int N = nmax + 1;
  std::vector<double> p(static_cast<size_t>(N * N), 0.0);
  p[0] = 1.0;
  for (int m = 1; m <= nmax; ++m) {
    p[m * N + m] = (m == 1 ? std::sqrt(3.0) : std::sqrt((2.0 * m + 1) / (2.0 * m))) * c * p[(m - 1) * N + m - 1];
  }
  for (int m = 0; m < nmax; ++m) p[(m + 1) * N + m] = std::sqrt(2.0 * m + 3) * x * p[m * N + m];
  for (int m = 0; m <= nmax; ++m) {
    for (int n = m + 2; n <= nmax; ++n) {
      const double a = std::sqrt((2.0 * n - 1) * (2.0 * n + 1) / ((n - m) * static_cast<double>(n + m)));
      const double b = std::sqrt((2.0 * n + 1) * (n + m - 1) * static_cast<double>(n - m - 1) /
                                 ((n - m) * static_cast<double>(n + m) * (2.0 * n - 3)));
      p[n * N + m] = a * x * p[(n - 1) * N + m] - b * p[(n - 2) * N + m];
    }
  }
  return p;
}

struct Blob {
  double lat, lon, radius;  // degrees
};
// Smoothed continents (centre, radius): enough geography for a zonally asymmetric climate.
constexpr Blob kLand[] = {{50, 80, 30},  {55, 30, 18},   {35, 100, 18}, {25, 45, 12},   {48, 255, 22},
                          {62, 250, 15}, {72, 318, 9},   {8, 20, 22},   {-15, 25, 14},  {-12, 298, 16},
                          {-32, 292, 10}, {-25, 134, 14}};

// The model's state and one step of it.
class SynthModel {
 public:
  SynthModel(int64_t H, int64_t W, uint64_t seed) : H_(H), W_(W), seed_(seed) {
    lat_ = synthetic_weather_lat(H);
    lon_ = synthetic_weather_lon(W);
    phi_.resize(H);
    sin_phi_.resize(H);
    for (int64_t j = 0; j < H; ++j) {
      phi_[j] = lat_[j] * kDeg;
      sin_phi_[j] = std::sin(phi_[j]);
    }
    dphi_ = kPi / static_cast<double>(H);
    dlam_ = 2 * kPi / static_cast<double>(W);
    land_.resize(H * W);
    for (int64_t j = 0; j < H; ++j)
      for (int64_t i = 0; i < W; ++i) land_[j * W + i] = synthetic_land_fraction(lat_[j], lon_[i]);

    // Wave modes (n, m), resolvable on the grid.
    const int nmax = static_cast<int>(std::min<int64_t>(kWaveNMax, H / 2));
    mmax_ = static_cast<int>(std::min<int64_t>({kWaveMMax, nmax, W / 4}));
    const double alpha = kWaveRefWind / (kRadius * std::cos(45 * kDeg));  // rad/s
    for (int m = 1; m <= mmax_; ++m) {
      for (int n = std::max(m, kWaveNMin); n <= nmax; ++n) {
        Mode md;
        md.m = m;
        md.n = n;
        md.omega = m * (alpha - 2 * (kOmega + alpha) / (n * (n + 1.0)));  // Rossby-Haurwitz
        md.tau = (4.0 + 60.0 / n) * 86400.0;
        md.sigma = std::exp(-((n - 8.0) / 5.0) * ((n - 8.0) / 5.0));
        modes_.push_back(md);
      }
    }
    // The amplitudes' variances add up to kWaveAmp^2 (each mode has unit mean square over the sphere).
    double total = 0;
    for (const Mode& md : modes_) total += md.sigma * md.sigma;
    for (Mode& md : modes_) {
      md.sigma *= kWaveAmp / std::sqrt(total);
      // Forcing of variance s^2 and correlation time tf gives E|B|^2 = s^2 tau^2 tf / (tau + tf).
      md.force = md.sigma * std::sqrt((md.tau + kForceTime) / (md.tau * md.tau * kForceTime));
    }
    // Meridional structure E(phi) Pbar_nm(sin phi), E = sin^2 phi (no waves on the equator),
    // and its phi-derivative (central difference of the closed form).
    const size_t K = modes_.size();
    ep_.assign(K * H, 0.0);
    dep_.assign(K * H, 0.0);
    const int N = nmax + 1;
    auto structure = [&](double p, std::vector<double>& out) {
      const std::vector<double> leg = legendre(nmax, std::sin(p));
      const double e = std::sin(p) * std::sin(p);
      for (size_t k = 0; k < K; ++k) out[k] = e * leg[modes_[k].n * N + modes_[k].m];
    };
    std::vector<double> a(K), b(K), c(K);
    constexpr double kEps = 1e-5;
    for (int64_t j = 0; j < H; ++j) {
      structure(phi_[j], a);
      structure(phi_[j] + kEps, b);
      structure(phi_[j] - kEps, c);
      for (size_t k = 0; k < K; ++k) {
        ep_[k * H + j] = a[k];
        dep_[k * H + j] = (b[k] - c[k]) / (2 * kEps);
      }
    }
    cos_.resize((mmax_ + 1) * W);
    sin_.resize((mmax_ + 1) * W);
    for (int m = 0; m <= mmax_; ++m)
      for (int64_t i = 0; i < W; ++i) {
        cos_[m * W + i] = std::cos(m * lon_[i] * kDeg);
        sin_[m * W + i] = std::sin(m * lon_[i] * kDeg);
      }
    // Start: amplitudes and forcings drawn with their stationary variances.
    amp_.resize(K);
    env_.resize(K);
    force_.resize(K);
    phase_.assign(K, 0.0);
    for (size_t k = 0; k < K; ++k) {
      env_[k] = modes_[k].sigma * normal_c();
      force_[k] = modes_[k].force * normal_c();
      amp_[k] = env_[k];
    }
    zp_.resize(H * W);
    zl_.resize(H * W);
    zf_.resize(H * W);
    u_.resize(H * W);
    v_.resize(H * W);
    tmp_.resize(H * W);
  }

  // Starts t850 and t2m at their equilibria for time t_hours.
  void init(double t_hours) {
    t_hours_ = t_hours;
    t850_.resize(H_ * W_);
    t2m_.resize(H_ * W_);
    const double s = season(t_hours / 24.0);
    for (int64_t j = 0; j < H_; ++j)
      for (int64_t i = 0; i < W_; ++i) t850_[j * W_ + i] = t850_equilibrium(j, i, s);
    for (int64_t k = 0; k < H_ * W_; ++k) t2m_[k] = t850_[k] + kLapse;
  }

  // Advances by dt seconds.
  void step(double dt) {
    const double day = t_hours_ / 24.0, s = season(day);
    waves();
    winds_500(s);
    for (int64_t k = 0; k < H_ * W_; ++k) {
      u_[k] *= kWind850;
      v_[k] *= kWind850;
    }
    advect_t850(dt);
    diffuse_t850(dt);
    const double relax = 1 - std::exp(-dt / kT850Relax);
    for (int64_t j = 0; j < H_; ++j)
      for (int64_t i = 0; i < W_; ++i) {
        double& T = t850_[j * W_ + i];
        T += (t850_equilibrium(j, i, s) - T) * relax;
      }
    surface_temperature(dt, t_hours_ + dt / 7200.0);
    // Waves: in the frame moving at its Rossby-Haurwitz phase speed a mode's complex envelope B is
    // damped (tau) and driven by red noise F (Ornstein-Uhlenbeck, correlation time kForceTime);
    // A = B exp(-i phase), phase += omega dt.
    const double fdecay = std::exp(-dt / kForceTime), fkick = std::sqrt(1 - fdecay * fdecay);
    for (size_t k = 0; k < modes_.size(); ++k) {
      const Mode& md = modes_[k];
      force_[k] = force_[k] * fdecay + md.force * fkick * normal_c();
      env_[k] = env_[k] * std::exp(-dt / md.tau) + force_[k] * dt;
      phase_[k] = std::fmod(phase_[k] + md.omega * dt, 2 * kPi);
      amp_[k] = env_[k] * std::polar(1.0, -phase_[k]);
    }
    t_hours_ += dt / 3600.0;
  }

  // Small white noise on t2m (once per output step; `index` numbers the output step).
  void t2m_noise(uint64_t index) {
    const uint64_t base = index * static_cast<uint64_t>(H_ * W_);
    for (int64_t k = 0; k < H_ * W_; ++k) t2m_[k] += kT2mNoise * Philox::normal(seed_, kStreamNoise, base + k);
  }

  // The fields now: out (V=5, H, W) in the order of synthetic_weather_variables().
  void fields(float* out) {
    const int64_t HW = H_ * W_;
    const double s = season(t_hours_ / 24.0);
    waves();
    winds_500(s);
    for (int64_t j = 0; j < H_; ++j) {
      const double zb = background_geopotential(phi_[j], s);
      const double turn = kTurning * std::tanh(lat_[j] / 10.0);  // towards low: left in the north
      const double ct = std::cos(turn), st = std::sin(turn);
      const double itcz = 6.0 * s, y = (lat_[j] - itcz) / kTradeWidth, g = std::exp(-y * y);
      for (int64_t i = 0; i < W_; ++i) {
        const int64_t k = j * W_ + i;
        out[k] = static_cast<float>(zb + zp_[k]);
        out[HW + k] = static_cast<float>(t850_[k]);
        out[2 * HW + k] = static_cast<float>(t2m_[k]);
        const double u = kSurfaceWind * (u_[k] * ct - v_[k] * st) - kTrade * g;
        const double v = kSurfaceWind * (u_[k] * st + v_[k] * ct) - kTradeMeridional * y * g;
        out[3 * HW + k] = static_cast<float>(u);
        out[4 * HW + k] = static_cast<float>(v);
      }
    }
  }

  double t_hours() const { return t_hours_; }

 private:
  struct Mode {
    int m = 0, n = 0;
    double omega = 0, tau = 0, sigma = 0, force = 0;  // rad/s, s, m^2/s^2, m^2/s^3
  };

  // A complex normal with E|z|^2 = 1 from the waves' stream.
  std::complex<double> normal_c() {
    const double re = Philox::normal(seed_, kStreamWaves, draws_), im = Philox::normal(seed_, kStreamWaves, draws_ + 1);
    draws_ += 2;
    return std::complex<double>(re, im) / std::sqrt(2.0);
  }

  double t850_equilibrium(int64_t j, int64_t i, double s) const {
    const double sp = sin_phi_[j];
    return kT850Eq - kT850Pole * sp * sp + (kT850Season + kT850LandSeason * land_[j * W_ + i]) * s * sp;
  }

  // z' and its derivatives from the amplitudes: z'(phi, lambda) = sum_k E P_k(phi) Re(A_k e^{i m lambda}).
  void waves() {
    std::vector<std::complex<double>> C((mmax_ + 1) * H_), D((mmax_ + 1) * H_);
    for (size_t k = 0; k < modes_.size(); ++k) {
      const int m = modes_[k].m;
      for (int64_t j = 0; j < H_; ++j) {
        C[m * H_ + j] += ep_[k * H_ + j] * amp_[k];
        D[m * H_ + j] += dep_[k * H_ + j] * amp_[k];
      }
    }
    for (int64_t j = 0; j < H_; ++j)
      for (int64_t i = 0; i < W_; ++i) {
        double z = 0, zl = 0, zf = 0;
        for (int m = 1; m <= mmax_; ++m) {
          const double c = cos_[m * W_ + i], s = sin_[m * W_ + i];
          const std::complex<double> a = C[m * H_ + j], d = D[m * H_ + j];
          z += a.real() * c - a.imag() * s;
          zl += -m * (a.imag() * c + a.real() * s);
          zf += d.real() * c - d.imag() * s;
        }
        zp_[j * W_ + i] = z;
        zl_[j * W_ + i] = zl;
        zf_[j * W_ + i] = zf;
      }
  }

  // Wind at 500 hPa: the background jet + the geostrophic wind of the waves (Coriolis parameter
  // kept at least that of 15 degrees so that it stays finite near the equator).
  void winds_500(double s) {
    const double fmin = 2 * kOmega * std::sin(15 * kDeg);
    for (int64_t j = 0; j < H_; ++j) {
      double f = 2 * kOmega * std::sin(phi_[j]);
      if (std::abs(f) < fmin) f = f < 0 ? -fmin : fmin;
      const double ub = background_wind(phi_[j], s), cp = std::cos(phi_[j]);
      for (int64_t i = 0; i < W_; ++i) {
        const int64_t k = j * W_ + i;
        u_[k] = ub - zf_[k] / (kRadius * f);
        v_[k] = zl_[k] / (kRadius * f * cp);
      }
    }
  }

  // Semi-Lagrangian advection: the value at the departure point (wind of the arrival point),
  // bicubic Lagrange interpolation, periodic in longitude, clamped at the polar rows, limited to
  // the range of the 4 surrounding nodes (no new extrema).
  void advect_t850(double dt) {
    auto lagrange = [](double x, double* w) {  // nodes -1, 0, 1, 2
      w[0] = -x * (x - 1) * (x - 2) / 6;
      w[1] = (x + 1) * (x - 1) * (x - 2) / 2;
      w[2] = -(x + 1) * x * (x - 2) / 2;
      w[3] = (x + 1) * x * (x - 1) / 6;
    };
    for (int64_t j = 0; j < H_; ++j) {
      const double cp = std::cos(phi_[j]);
      for (int64_t i = 0; i < W_; ++i) {
        const int64_t k = j * W_ + i;
        double x = i - u_[k] * dt / (kRadius * cp) / dlam_;
        double y = j - v_[k] * dt / kRadius / dphi_;
        y = std::clamp(y, 0.0, static_cast<double>(H_ - 1));
        const double fx = std::floor(x), fy = std::floor(y);
        const int64_t ix = static_cast<int64_t>(fx), iy = static_cast<int64_t>(fy);
        double wx[4], wy[4];
        lagrange(x - fx, wx);
        lagrange(y - fy, wy);
        int64_t cols[4];
        for (int a = 0; a < 4; ++a) cols[a] = ((ix - 1 + a) % W_ + W_) % W_;
        double acc = 0, lo = 1e300, hi = -1e300;
        for (int b = 0; b < 4; ++b) {
          const double* row_p = t850_.data() + std::clamp<int64_t>(iy - 1 + b, 0, H_ - 1) * W_;
          double row = 0;
          for (int a = 0; a < 4; ++a) {
            const double val = row_p[cols[a]];
            row += wx[a] * val;
            if ((a == 1 || a == 2) && (b == 1 || b == 2)) {
              lo = std::min(lo, val);
              hi = std::max(hi, val);
            }
          }
          acc += wy[b] * row;
        }
        tmp_[k] = std::clamp(acc, lo, hi);
      }
    }
    t850_.swap(tmp_);
  }

  // Explicit diffusion, flux form on the sphere (no flux through the poles); the longitudinal
  // coefficient is capped near the poles where the cells are narrow (a polar filter).
  void diffuse_t850(double dt) {
    const double ky = kDiffusivity * dt / (kRadius * kRadius * dphi_ * dphi_);
    for (int64_t j = 0; j < H_; ++j) {
      const double cp = std::cos(phi_[j]);
      const double cn = j + 1 < H_ ? std::cos(phi_[j] + dphi_ / 2) : 0.0;
      const double cs = j > 0 ? std::cos(phi_[j] - dphi_ / 2) : 0.0;
      const double dx = kRadius * cp * dlam_;
      const double kx = std::min(kDiffusivity * dt / (dx * dx), 0.2);
      for (int64_t i = 0; i < W_; ++i) {
        const int64_t k = j * W_ + i;
        const double T = t850_[k];
        const double e = t850_[j * W_ + (i + 1) % W_], w = t850_[j * W_ + (i + W_ - 1) % W_];
        const double n = j + 1 < H_ ? t850_[k + W_] : T, s = j > 0 ? t850_[k - W_] : T;
        tmp_[k] = T + kx * (e - 2 * T + w) + ky * (cn * (n - T) - cs * (T - s)) / cp;
      }
    }
    t850_.swap(tmp_);
  }

  // t2m relaxes to t850 + lapse + the daily cycle of insolation, evaluated at t_mid (hours).
  void surface_temperature(double dt, double t_mid) {
    if (dt != t2m_decay_dt_) {
      t2m_decay_.resize(H_ * W_);
      for (int64_t k = 0; k < H_ * W_; ++k) {
        const double L = land_[k];
        t2m_decay_[k] = std::exp(-dt * (L / kTauLand + (1 - L) / kTauOcean));
      }
      t2m_decay_dt_ = dt;
    }
    const double day = t_mid / 24.0, dec = declination(day);
    const double hour = std::fmod(std::fmod(t_mid, 24.0) + 24.0, 24.0);
    const double sd = std::sin(dec), cd = std::cos(dec);
    // Hour angle at longitude lambda: h = A + lambda, A = 2 pi hour / 24 - pi.
    const double A = 2 * kPi * hour / 24.0 - kPi, ca = std::cos(A), sa = std::sin(A);
    for (int64_t j = 0; j < H_; ++j) {
      const double sp = sin_phi_[j], cp = std::cos(phi_[j]);
      const double h0 = std::acos(std::clamp(-std::tan(phi_[j]) * std::tan(dec), -1.0, 1.0));
      const double qmean = (h0 * sp * sd + cp * cd * std::sin(h0)) / kPi;  // daily mean of max(0, cos zenith)
      for (int64_t i = 0; i < W_; ++i) {
        const int64_t k = j * W_ + i;
        const double cos_h = ca * cos_[W_ + i] - sa * sin_[W_ + i];  // cos(A + lambda_i)
        const double q = std::max(0.0, sp * sd + cp * cd * cos_h);
        const double amp = kDiurnalOcean + (kDiurnalLand - kDiurnalOcean) * land_[k];
        const double target = t850_[k] + kLapse + amp * (q - qmean);
        t2m_[k] = target + (t2m_[k] - target) * t2m_decay_[k];
      }
    }
  }

  int64_t H_, W_;
  uint64_t seed_;
  std::vector<double> lat_, lon_, phi_, sin_phi_, land_;
  std::vector<double> t2m_decay_;  // (H, W) exp(-dt / response time) for t2m_decay_dt_
  double t2m_decay_dt_ = -1;
  double dphi_ = 0, dlam_ = 0;
  int mmax_ = 0;
  std::vector<Mode> modes_;
  std::vector<double> ep_, dep_, cos_, sin_;  // (K, H), (K, H), (M+1, W), (M+1, W)
  std::vector<std::complex<double>> amp_, env_, force_;  // (K): A, B, F
  std::vector<double> phase_;                            // (K)
  uint64_t draws_ = 0;
  std::vector<double> zp_, zl_, zf_, u_, v_, tmp_;  // (H, W) each
  std::vector<double> t850_, t2m_;                  // (H, W) each
  double t_hours_ = 0;
};

int64_t steps_of(double days, int64_t step_hours) {
  return static_cast<int64_t>(std::llround(days * 24.0 / static_cast<double>(step_hours)));
}

std::map<std::string, std::string> settings_of(const SyntheticWeatherOptions& o) {
  return {{"source", "weft synthetic weather generator (src/data/weather_synth.cc); synthetic, not observed"},
          {"grid", fmt::format("{}x{}", o.height, o.width)},
          {"step_hours", std::to_string(o.step_hours)},
          {"steps", fmt::format("train {}, val {}, test {}", steps_of(o.train_days, o.step_hours),
                                steps_of(o.val_days, o.step_hours), steps_of(o.test_days, o.step_hours))},
          {"spin_up_steps", std::to_string(steps_of(o.spin_up_days, o.step_hours))},
          {"seed", std::to_string(o.seed)},
          {"version", "1"}};
}

// Chan et al.'s running (mean, M2) merge of whole fields, as WeatherDataset::compute_stats.
struct RunningStats {
  double n = 0, mean = 0, m2 = 0;
  void add(const float* p, int64_t count) {
    double fm = 0;
    for (int64_t k = 0; k < count; ++k) fm += p[k];
    fm /= static_cast<double>(count);
    double fm2 = 0;
    for (int64_t k = 0; k < count; ++k) fm2 += (p[k] - fm) * (p[k] - fm);
    const double nb = static_cast<double>(count), d = fm - mean, nn = n + nb;
    mean += d * nb / nn;
    m2 += fm2 + d * d * n * nb / nn;
    n = nn;
  }
};

}  // namespace

std::vector<double> synthetic_weather_lat(int64_t H) {
  std::vector<double> v(static_cast<size_t>(H));
  for (int64_t j = 0; j < H; ++j) v[j] = -90.0 + (j + 0.5) * 180.0 / static_cast<double>(H);
  return v;
}

std::vector<double> synthetic_weather_lon(int64_t W) {
  std::vector<double> v(static_cast<size_t>(W));
  for (int64_t i = 0; i < W; ++i) v[i] = i * 360.0 / static_cast<double>(W);
  return v;
}

const std::vector<WeatherVariableInfo>& synthetic_weather_variables() {
  static const std::vector<WeatherVariableInfo> v = {
      {"z500", "m**2 s**-2", "geopotential at 500 hPa"},
      {"t850", "K", "temperature at 850 hPa"},
      {"t2m", "K", "2 metre temperature"},
      {"u10", "m s**-1", "10 metre U wind component"},
      {"v10", "m s**-1", "10 metre V wind component"},
  };
  return v;
}

double synthetic_land_fraction(double lat_deg, double lon_deg) {
  const double p1 = lat_deg * kDeg, l1 = lon_deg * kDeg;
  double L = 0;
  for (const Blob& b : kLand) {
    const double p2 = b.lat * kDeg, l2 = b.lon * kDeg;
    const double c = std::sin(p1) * std::sin(p2) + std::cos(p1) * std::cos(p2) * std::cos(l1 - l2);
    const double d = std::acos(std::clamp(c, -1.0, 1.0)) / kDeg / b.radius;  // distance in radii
    L += std::exp(-d * d * d * d);
  }
  // Antarctica: everything south of about 70 S.
  L += 1.0 / (1.0 + std::exp((lat_deg + 71.0) / 2.0));
  return std::min(1.0, L);
}

void check_synthetic_weather_options(const SyntheticWeatherOptions& o) {
  if (o.out_dir.empty()) throw_input("synthetic weather: no output folder given");
  if (o.height < 8 || o.height > 721 || o.width < 16 || o.width > 1440) {
    throw_input("synthetic weather: grid {}x{} (HxW) is outside 8x16 .. 721x1440", o.height, o.width);
  }
  if (o.step_hours < 1 || o.step_hours > 24) {
    throw_input("synthetic weather: step of {} h is outside [1, 24] h", o.step_hours);
  }
  for (auto [name, days] : {std::pair{"train", o.train_days}, std::pair{"val", o.val_days},
                            std::pair{"test", o.test_days}}) {
    if (!std::isfinite(days) || days > 36525.0 || steps_of(days, o.step_hours) < 2) {
      throw_input("synthetic weather: the {} split of {} days holds fewer than 2 steps of {} h (or more than 100 years)",
                  name, days, o.step_hours);
    }
  }
  if (!(o.spin_up_days >= 0 && o.spin_up_days <= 3650)) {
    throw_input("synthetic weather: spin-up of {} days is outside [0, 3650]", o.spin_up_days);
  }
}

namespace {

// A NetCDF-4 file's header, coordinates and chunk index beside its fields (measured: under 40 KB
// for the default grid; bounded generously).
constexpr int64_t kFileOverhead = int64_t{1} << 20;

// Refuses before anything is written when the folder's file system has less than `bytes` free
// for an unprivileged writer (statvfs f_bavail), naming both.
void check_free_space(const std::string& dir, int64_t bytes) {
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) return;  // unknown: the writes will say
  const double free = static_cast<double>(s.f_bavail) * static_cast<double>(s.f_frsize);
  if (free < static_cast<double>(bytes)) {
    throw_input("{}: the synthetic weather needs about {:.1f} MiB and its file system has {:.1f} MiB free: free space, "
                "or shorten the splits (--years/--days, --val-days, --test-days) or the grid",
                dir, static_cast<double>(bytes) / (1 << 20), free / (1 << 20));
  }
}

}  // namespace

SyntheticWeatherResult generate_synthetic_weather(const SyntheticWeatherOptions& o) {
  check_synthetic_weather_options(o);
  const auto t0 = std::chrono::steady_clock::now();
  const fs::path dir(o.out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) throw_input("{}: cannot create the output folder ({})", o.out_dir, ec.message());

  SyntheticWeatherResult r;
  r.train_path = (dir / "train.nc").string();
  r.val_path = (dir / "val.nc").string();
  r.test_path = (dir / "test.nc").string();
  r.stats_path = (dir / "stats.json").string();
  const std::map<std::string, std::string> settings = settings_of(o);

  // Earlier outputs: the same settings are regenerated, others need overwrite.
  std::vector<std::string> present;
  for (const std::string& p : {r.train_path, r.val_path, r.test_path, r.stats_path})
    if (fs::exists(p)) present.push_back(fs::path(p).filename().string());
  if (!present.empty() && !o.overwrite) {
    bool same = false;
    try {
      const auto j = nlohmann::json::parse(std::ifstream(r.stats_path));
      same = j.at("about").get<std::map<std::string, std::string>>() == settings;
    } catch (const std::exception&) {
    }
    if (!same) {
      throw_input("{}: already holds {} from other settings (or an incomplete run); pass --overwrite to replace them",
                  o.out_dir, fmt::join(present, ", "));
    }
  }

  const int64_t H = o.height, W = o.width, HW = H * W, V = 5;
  const int64_t spin = steps_of(o.spin_up_days, o.step_hours);
  r.train_steps = steps_of(o.train_days, o.step_hours);
  r.val_steps = steps_of(o.val_days, o.step_hours);
  r.test_steps = steps_of(o.test_days, o.step_hours);
  check_free_space(o.out_dir, (r.train_steps + r.val_steps + r.test_steps) * V * HW * 4 + 3 * kFileOverhead);
  fs::remove(r.stats_path, ec);  // written last: its absence marks an incomplete folder
  const int64_t sub = o.step_hours;  // one-hour substeps
  const double dt = 3600.0 * static_cast<double>(o.step_hours) / static_cast<double>(sub);

  SynthModel model(H, W, o.seed);
  model.init(-static_cast<double>(spin * o.step_hours));
  const std::vector<double> lat = synthetic_weather_lat(H), lon = synthetic_weather_lon(W);
  const auto& vars = synthetic_weather_variables();
  std::map<std::string, std::string> attrs = settings;
  attrs["title"] = "weft synthetic weather";

  std::vector<float> fields(static_cast<size_t>(V * HW));
  std::vector<RunningStats> stats(V);
  uint64_t out_index = 0;
  for (int64_t k = 0; k < spin; ++k) {
    for (int64_t s = 0; s < sub; ++s) model.step(dt);
    model.t2m_noise(out_index++);
  }
  const std::pair<const std::string*, int64_t> splits[] = {
      {&r.train_path, r.train_steps}, {&r.val_path, r.val_steps}, {&r.test_path, r.test_steps}};
  for (size_t sp = 0; sp < 3; ++sp) {
    std::map<std::string, std::string> a = attrs;
    a["split"] = sp == 0 ? "train" : sp == 1 ? "val" : "test";
    WeatherWriter w(*splits[sp].first, lat, lon, vars, "hours since 2000-01-01 00:00:00", a);
    for (int64_t k = 0; k < splits[sp].second; ++k) {
      model.fields(fields.data());
      w.append(model.t_hours(), fields.data());
      if (sp == 0)
        for (int64_t v = 0; v < V; ++v) stats[v].add(fields.data() + v * HW, HW);
      for (int64_t s = 0; s < sub; ++s) model.step(dt);
      model.t2m_noise(out_index++);
    }
    w.close();
    log_info("synthetic weather: {} ({} steps of {} h)", *splits[sp].first, splits[sp].second, o.step_hours);
  }
  WeatherStats ws;
  std::vector<std::string> units;
  for (int64_t v = 0; v < V; ++v) {
    ws.variables.push_back(vars[v].name);
    ws.mean.push_back(stats[v].mean);
    ws.std.push_back(std::sqrt(stats[v].m2 / stats[v].n));
    units.push_back(vars[v].units);
  }
  ws.save(r.stats_path, "train.nc", units, settings);
  for (const std::string& p : {r.train_path, r.val_path, r.test_path, r.stats_path}) {
    r.bytes += static_cast<int64_t>(fs::file_size(p, ec));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_info("synthetic weather: {} -> train/val/test.nc + stats.json, {:.1f} MB in {:.1f} s", o.out_dir,
           static_cast<double>(r.bytes) / 1e6, r.seconds);
  return r;
}

}  // namespace weft
