#include "data/weather.h"

#include <hdf5.h>
#include <netcdf.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/signal_cleanup.h"
#include "core/rng.h"
#include "data/loader.h"
#include "data/text_util.h"

namespace weft {

namespace fs = std::filesystem;

namespace {

// netCDF-C is not thread-safe: every call of this file holds this lock.
std::mutex& nc_mutex() {
  // Before the first netCDF call (which starts HDF5): no HDF5 exit handler. A write that failed
  // on a full disk leaves HDF5 a file it cannot close (nc_close fails in its flush; nc_abort
  // does not release it), and its handler then crashed the process at exit, after weft's one
  // line (issue 34 class 5). Every file weft opens is closed or aborted explicitly, and the
  // operating system reclaims the rest.
  static const bool no_atexit = [] {
    H5dont_atexit();
    return true;
  }();
  (void)no_atexit;
  static std::mutex m;
  return m;
}

// Closes a netCDF id on scope exit.
struct NcFile {
  int id = -1;
  ~NcFile() {
    if (id >= 0) nc_close(id);
  }
};

std::string dim_name(int ncid, int dimid) {
  char name[NC_MAX_NAME + 1] = {};
  nc_inq_dimname(ncid, dimid, name);
  return name;
}

size_t dim_len(int ncid, int dimid) {
  size_t n = 0;
  nc_inq_dimlen(ncid, dimid, &n);
  return n;
}

std::vector<int> var_dims(int ncid, int varid) {
  int nd = 0;
  nc_inq_varndims(ncid, varid, &nd);
  std::vector<int> d(static_cast<size_t>(nd));
  if (nd > 0) nc_inq_vardimid(ncid, varid, d.data());
  return d;
}

// "(time=10, lat=32, lon=64)"
std::string describe_dims(int ncid, const std::vector<int>& dims) {
  std::string s = "(";
  for (size_t k = 0; k < dims.size(); ++k) {
    s += fmt::format("{}{}={}", k ? ", " : "", dim_name(ncid, dims[k]), dim_len(ncid, dims[k]));
  }
  return s + ")";
}

std::string var_name(int ncid, int varid) {
  char name[NC_MAX_NAME + 1] = {};
  nc_inq_varname(ncid, varid, name);
  return name;
}

// A text attribute (NC_CHAR or NC_STRING), or nullopt when absent or of another type.
std::optional<std::string> text_att(int ncid, int varid, const char* name) {
  nc_type type = NC_NAT;
  size_t len = 0;
  if (nc_inq_att(ncid, varid, name, &type, &len) != NC_NOERR) return std::nullopt;
  if (type == NC_CHAR) {
    std::string s(len, '\0');
    if (len > 0 && nc_get_att_text(ncid, varid, name, s.data()) != NC_NOERR) return std::nullopt;
    while (!s.empty() && s.back() == '\0') s.pop_back();
    return s;
  }
  if (type == NC_STRING && len >= 1) {
    std::vector<char*> p(len, nullptr);
    if (nc_get_att_string(ncid, varid, name, p.data()) != NC_NOERR) return std::nullopt;
    std::string s = p[0] ? p[0] : "";
    nc_free_string(len, p.data());
    return s;
  }
  return std::nullopt;
}

std::optional<double> number_att(int ncid, int varid, const char* name) {
  nc_type type = NC_NAT;
  size_t len = 0;
  if (nc_inq_att(ncid, varid, name, &type, &len) != NC_NOERR || len < 1) return std::nullopt;
  if (type == NC_CHAR || type == NC_STRING) return std::nullopt;
  std::vector<double> v(len);
  if (nc_get_att_double(ncid, varid, name, v.data()) != NC_NOERR) return std::nullopt;
  return v[0];
}

bool is_float_type(nc_type t) { return t == NC_FLOAT || t == NC_DOUBLE; }
bool is_int_type(nc_type t) {
  return t == NC_BYTE || t == NC_UBYTE || t == NC_SHORT || t == NC_USHORT || t == NC_INT || t == NC_UINT ||
         t == NC_INT64 || t == NC_UINT64;
}

double default_fill(nc_type t) {
  switch (t) {
    case NC_BYTE: return NC_FILL_BYTE;
    case NC_UBYTE: return NC_FILL_UBYTE;
    case NC_SHORT: return NC_FILL_SHORT;
    case NC_USHORT: return NC_FILL_USHORT;
    case NC_INT: return NC_FILL_INT;
    case NC_UINT: return NC_FILL_UINT;
    case NC_INT64: return static_cast<double>(NC_FILL_INT64);
    case NC_UINT64: return static_cast<double>(NC_FILL_UINT64);
    case NC_DOUBLE: return NC_FILL_DOUBLE;
    default: return NC_FILL_FLOAT;
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// Hours per unit of "<unit> since <date>" and the date; nullopt when the units are not of that form.
std::optional<std::pair<double, std::string>> parse_time_units(const std::string& units) {
  const std::string u = trim(units);
  const size_t sp = u.find(' ');
  if (sp == std::string::npos) return std::nullopt;
  const std::string unit = lower(u.substr(0, sp));
  std::string rest = trim(u.substr(sp + 1));
  if (lower(rest.substr(0, 6)) != "since " || trim(rest.substr(6)).empty()) return std::nullopt;
  rest = trim(rest.substr(6));
  double h = 0;
  if (unit == "hours" || unit == "hour" || unit == "hrs" || unit == "hr" || unit == "h") h = 1.0;
  else if (unit == "minutes" || unit == "minute" || unit == "mins" || unit == "min") h = 1.0 / 60.0;
  else if (unit == "seconds" || unit == "second" || unit == "secs" || unit == "sec" || unit == "s") h = 1.0 / 3600.0;
  else if (unit == "days" || unit == "day" || unit == "d") h = 24.0;
  else return std::nullopt;
  return std::make_pair(h, rest);
}

// The first dimension whose name is one of `names`, or -1.
int find_dim(int ncid, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    int id = -1;
    if (nc_inq_dimid(ncid, n, &id) == NC_NOERR) return id;
  }
  return -1;
}

std::string all_dims(int ncid) {
  int nd = 0;
  nc_inq_ndims(ncid, &nd);
  std::vector<int> ids(static_cast<size_t>(nd));
  for (int k = 0; k < nd; ++k) ids[k] = k;
  return describe_dims(ncid, ids);
}

// Reads the 1-D coordinate variable of dimension `dimid` as double; InputError when it is missing,
// not 1-D on that dimension (a length mismatch), or unreadable.
std::vector<double> read_coordinate(int ncid, int dimid, const std::string& path) {
  const std::string name = dim_name(ncid, dimid);
  const size_t n = dim_len(ncid, dimid);
  int varid = -1;
  if (nc_inq_varid(ncid, name.c_str(), &varid) != NC_NOERR) {
    throw_input("{}: the coordinate variable '{}' of dimension {}={} is missing", path, name, name, n);
  }
  const std::vector<int> dims = var_dims(ncid, varid);
  if (dims.size() != 1 || dims[0] != dimid) {
    throw_input("{}: coordinate variable '{}' has dims {}, expected ({}={}): its length does not match its dimension",
                path, name, describe_dims(ncid, dims), name, n);
  }
  nc_type type = NC_NAT;
  nc_inq_vartype(ncid, varid, &type);
  if (!is_float_type(type) && !is_int_type(type)) {
    throw_input("{}: coordinate variable '{}' is not numeric", path, name);
  }
  std::vector<double> v(n);
  if (n > 0) {
    const int st = nc_get_var_double(ncid, varid, v.data());
    if (st != NC_NOERR) throw_input("{}: cannot read coordinate '{}': {}", path, name, nc_strerror(st));
  }
  for (size_t k = 0; k < n; ++k) {
    if (!std::isfinite(v[k])) throw_input("{}: coordinate '{}' has a non-finite value {} at index {}", path, name, v[k], k);
  }
  return v;
}

// Strictly increasing or strictly decreasing.
void require_monotonic(const std::vector<double>& v, const std::string& what, const std::string& path) {
  if (v.size() < 2) return;
  const bool up = v[1] > v[0];
  for (size_t k = 1; k < v.size(); ++k) {
    if (up ? !(v[k] > v[k - 1]) : !(v[k] < v[k - 1])) {
      throw_input("{}: {} is not strictly monotonic: index {} is {} after {}", path, what, k, v[k], v[k - 1]);
    }
  }
}

// How to turn the values of one variable into physical units, and which ones are missing.
struct VarCodec {
  int varid = -1;
  double scale = 1.0, offset = 0.0;
  std::vector<float> missing;  // raw values that mark a missing value (_FillValue, missing_value, default fill)
};

std::string nc_message(int st) { return nc_strerror(st); }

}  // namespace

// The open netCDF file (closed after a resident load) and the codecs of the variables.
struct WeatherDataset::Reader {
  int ncid = -1;
  std::vector<VarCodec> codecs;  // (V)
  ~Reader() {
    if (ncid >= 0) {
      std::lock_guard<std::mutex> lock(nc_mutex());
      nc_close(ncid);
    }
  }
};

WeatherDataset::WeatherDataset() = default;
WeatherDataset::WeatherDataset(WeatherDataset&&) noexcept = default;
WeatherDataset& WeatherDataset::operator=(WeatherDataset&&) noexcept = default;
WeatherDataset::~WeatherDataset() = default;

namespace {

// Unpacks raw values of variable v at time t into physical units in place and checks them.
void decode_field(const VarCodec& c, float* p, int64_t n, int64_t W, const WeatherDataset& ds, int64_t v,
                  int64_t t) {
  const bool packed = c.scale != 1.0 || c.offset != 0.0;
  for (int64_t k = 0; k < n; ++k) {
    float x = p[k];
    for (float m : c.missing) {
      if (x == m) {
        throw_input("{}: variable '{}' has a missing value ({}) at time index {}, lat index {} ({}), lon index {} ({})",
                    ds.path(), ds.variables()[v], x, t, k / W, ds.lat()[k / W], k % W, ds.lon()[k % W]);
      }
    }
    if (packed) x = static_cast<float>(x * c.scale + c.offset);
    if (!std::isfinite(x)) {
      throw_input("{}: variable '{}' has a non-finite value ({}) at time index {}, lat index {} ({}), lon index {} ({})",
                  ds.path(), ds.variables()[v], x, t, k / W, ds.lat()[k / W], k % W, ds.lon()[k % W]);
    }
    p[k] = x;
  }
}

// A NetCDF-4 file is an HDF5 file, whose superblock records where the file ends: a file shorter
// than that was cut (a copy or a write that stopped), and the library then reads zeros where the
// data should be. The superblock sits at offset 0, 512, 1024, ... (HDF5 File Format
// Specification, section II.A: version 0/1 and 2/3 layouts); returns the recorded end (base
// address + end-of-file address) or -1 when the file is not HDF5 or the field is undefined.
int64_t hdf5_recorded_end(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  static const unsigned char kSig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  for (int64_t at = 0; at <= (int64_t{1} << 20); at = at == 0 ? 512 : 2 * at) {
    unsigned char b[96] = {0};
    in.clear();
    in.seekg(at);
    if (!in.read(reinterpret_cast<char*>(b), sizeof(b))) return -1;
    if (std::memcmp(b, kSig, 8) != 0) continue;
    const int version = b[8];
    auto addr = [&](size_t off, int size) {
      uint64_t v = 0;
      for (int i = size - 1; i >= 0; --i) v = (v << 8) | b[off + static_cast<size_t>(i)];
      return v;
    };
    int so = 0;
    size_t base = 0;
    if (version == 0 || version == 1) {
      so = b[13];
      base = version == 0 ? 24 : 28;  // after the B-tree Ks and the consistency flags (+ v1's indexed K)
    } else if (version == 2 || version == 3) {
      so = b[9];
      base = 12;
    } else {
      return -1;
    }
    if (so != 4 && so != 8) return -1;
    const uint64_t undefined = so == 8 ? ~uint64_t{0} : 0xffffffffu;
    const uint64_t base_addr = addr(base, so);
    const uint64_t eof = addr(base + 2 * static_cast<size_t>(so), so);  // after the base and one more address
    if (eof == undefined || base_addr == undefined) return -1;
    return static_cast<int64_t>(base_addr + eof);
  }
  return -1;
}

}  // namespace

WeatherDataset WeatherDataset::open(const std::string& path, const std::vector<std::string>& variables,
                                    int64_t max_resident_bytes) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw_input("{}: weather file not found", path);
  if (!fs::is_regular_file(path, ec)) throw_input("{}: not a regular file", path);
  const int64_t size = static_cast<int64_t>(fs::file_size(path, ec));
  if (const int64_t end = hdf5_recorded_end(path); end > 0 && !ec && size < end) {
    throw_input("{}: truncated: {} bytes, but its HDF5 superblock says the file ends at byte {} (a copy or a write that "
                "stopped); write it again",
                path, size, end);
  }

  WeatherDataset ds;
  ds.path_ = path;
  ds.reader_ = std::make_unique<Reader>();
  std::lock_guard<std::mutex> lock(nc_mutex());
  NcFile f;
  int st = nc_open(path.c_str(), NC_NOWRITE, &f.id);
  if (st != NC_NOERR) {
    f.id = -1;
    throw_input("{}: not a readable NetCDF file ({})", path, nc_message(st));
  }
  const int ncid = f.id;

  const int time_dim = find_dim(ncid, {"time", "valid_time"});
  const int lat_dim = find_dim(ncid, {"lat", "latitude"});
  const int lon_dim = find_dim(ncid, {"lon", "longitude"});
  if (time_dim < 0 || lat_dim < 0 || lon_dim < 0) {
    throw_input("{}: a weather file needs dimensions time, lat and lon (or valid_time, latitude, longitude); it has {}",
                path, all_dims(ncid));
  }

  // Coordinates.
  ds.lat_ = read_coordinate(ncid, lat_dim, path);
  ds.lon_ = read_coordinate(ncid, lon_dim, path);
  std::vector<double> times = read_coordinate(ncid, time_dim, path);
  ds.H_ = static_cast<int64_t>(ds.lat_.size());
  ds.W_ = static_cast<int64_t>(ds.lon_.size());
  ds.T_ = static_cast<int64_t>(times.size());
  if (ds.H_ < 1 || ds.W_ < 1) throw_input("{}: empty grid: lat={} lon={}", path, ds.H_, ds.W_);
  for (size_t j = 0; j < ds.lat_.size(); ++j) {
    if (ds.lat_[j] < -90.0 || ds.lat_[j] > 90.0) {
      throw_input("{}: latitude {} at index {} is outside [-90, 90]", path, ds.lat_[j], j);
    }
  }
  require_monotonic(ds.lat_, "latitude", path);
  require_monotonic(ds.lon_, "longitude", path);
  for (auto [dim, want] : {std::pair{lat_dim, "degrees_north"}, std::pair{lon_dim, "degrees_east"}}) {
    int varid = -1;
    nc_inq_varid(ncid, dim_name(ncid, dim).c_str(), &varid);
    if (auto u = text_att(ncid, varid, "units"); u && lower(*u).rfind("degree", 0) != 0) {
      throw_input("{}: coordinate '{}' has units '{}', expected {}", path, dim_name(ncid, dim), *u, want);
    }
  }

  // Time axis.
  {
    int varid = -1;
    nc_inq_varid(ncid, dim_name(ncid, time_dim).c_str(), &varid);
    auto u = text_att(ncid, varid, "units");
    if (!u) throw_input("{}: the time coordinate '{}' has no units attribute", path, dim_name(ncid, time_dim));
    auto parsed = parse_time_units(*u);
    if (!parsed) {
      throw_input("{}: time units '{}' are not of the form '<hours|minutes|seconds|days> since <date>'", path, *u);
    }
    ds.time_units_ = *u;
    ds.time_reference_ = parsed->second;
    for (double& x : times) x *= parsed->first;
    ds.times_ = std::move(times);
  }
  if (ds.T_ < 2) throw_input("{}: a weather file needs at least 2 time steps, it has {}", path, ds.T_);
  ds.step_hours_ = ds.times_[1] - ds.times_[0];
  if (!(ds.step_hours_ > 0)) {
    throw_input("{}: time must increase: step 0 goes from {} h to {} h", path, ds.times_[0], ds.times_[1]);
  }
  for (int64_t k = 1; k + 1 < ds.T_; ++k) {
    const double d = ds.times_[k + 1] - ds.times_[k];
    if (std::abs(d - ds.step_hours_) > 1e-6 * std::max(1.0, ds.step_hours_)) {
      throw_input("{}: time steps are not uniform: step {} goes from {} h to {} h ({} h), the first is {} h", path, k,
                  ds.times_[k], ds.times_[k + 1], d, ds.step_hours_);
    }
  }

  // Variables.
  int nvars = 0;
  nc_inq_nvars(ncid, &nvars);
  const std::vector<int> want_dims = {time_dim, lat_dim, lon_dim};
  auto usable_type = [&](int varid) {
    nc_type type = NC_NAT;
    nc_inq_vartype(ncid, varid, &type);
    if (is_float_type(type)) return true;
    return is_int_type(type) && (number_att(ncid, varid, "scale_factor") || number_att(ncid, varid, "add_offset"));
  };
  std::vector<int> candidates;
  for (int v = 0; v < nvars; ++v) {
    if (var_dims(ncid, v) == want_dims && usable_type(v)) candidates.push_back(v);
  }
  auto candidate_names = [&] {
    std::string s;
    for (int v : candidates) s += (s.empty() ? "" : ", ") + var_name(ncid, v);
    return s.empty() ? std::string("none") : s;
  };
  std::vector<int> chosen;
  if (variables.empty()) {
    if (candidates.empty()) {
      std::string all;
      for (int v = 0; v < nvars; ++v) {
        all += fmt::format("{}{} {}", all.empty() ? "" : ", ", var_name(ncid, v), describe_dims(ncid, var_dims(ncid, v)));
      }
      throw_input("{}: no float variable with dims ({}, {}, {}); variables: {}", path, dim_name(ncid, time_dim),
                  dim_name(ncid, lat_dim), dim_name(ncid, lon_dim), all.empty() ? "none" : all);
    }
    chosen = candidates;
  } else {
    for (size_t k = 0; k < variables.size(); ++k) {
      const std::string& name = variables[k];
      for (size_t k2 = 0; k2 < k; ++k2) {
        if (variables[k2] == name) throw_input("{}: variable '{}' is requested twice", path, name);
      }
      int varid = -1;
      if (nc_inq_varid(ncid, name.c_str(), &varid) != NC_NOERR) {
        throw_input("{}: no variable '{}' (fields in this file: {})", path, name, candidate_names());
      }
      const std::vector<int> d = var_dims(ncid, varid);
      if (d != want_dims) {
        throw_input("{}: variable '{}' has dims {} (rank {}), expected ({}, {}, {})", path, name, describe_dims(ncid, d),
                    d.size(), dim_name(ncid, time_dim), dim_name(ncid, lat_dim), dim_name(ncid, lon_dim));
      }
      if (!usable_type(varid)) {
        throw_input("{}: variable '{}' is neither float/double nor an integer packed with scale_factor/add_offset",
                    path, name);
      }
      chosen.push_back(varid);
    }
  }
  for (int varid : chosen) {
    VarCodec c;
    c.varid = varid;
    c.scale = number_att(ncid, varid, "scale_factor").value_or(1.0);
    c.offset = number_att(ncid, varid, "add_offset").value_or(0.0);
    nc_type type = NC_NAT;
    nc_inq_vartype(ncid, varid, &type);
    c.missing.push_back(static_cast<float>(number_att(ncid, varid, "_FillValue").value_or(default_fill(type))));
    if (auto m = number_att(ncid, varid, "missing_value")) c.missing.push_back(static_cast<float>(*m));
    ds.variables_.push_back(var_name(ncid, varid));
    ds.units_.push_back(text_att(ncid, varid, "units").value_or(""));
    ds.reader_->codecs.push_back(std::move(c));
  }
  const int64_t V = ds.num_variables();
  ds.mean_.assign(V, 0.0);
  ds.std_.assign(V, 1.0);

  const int64_t HW = ds.H_ * ds.W_;
  const double bytes = 4.0 * static_cast<double>(V) * ds.T_ * HW;
  if (bytes <= static_cast<double>(max_resident_bytes)) {
    ds.data_.resize(static_cast<size_t>(V * ds.T_ * HW));
    for (int64_t v = 0; v < V; ++v) {
      float* dst = ds.data_.data() + v * ds.T_ * HW;
      st = nc_get_var_float(ncid, ds.reader_->codecs[v].varid, dst);
      if (st != NC_NOERR) throw_input("{}: cannot read variable '{}': {}", path, ds.variables_[v], nc_message(st));
      for (int64_t t = 0; t < ds.T_; ++t) decode_field(ds.reader_->codecs[v], dst + t * HW, HW, ds.W_, ds, v, t);
    }
  } else {
    ds.reader_->ncid = f.id;  // kept open for reads on demand
    f.id = -1;
  }
  return ds;
}

void WeatherDataset::read_raw(int64_t v, int64_t t, float* out) const {
  const int64_t HW = H_ * W_;
  if (!data_.empty()) {
    std::memcpy(out, data_.data() + (v * T_ + t) * HW, static_cast<size_t>(HW) * sizeof(float));
    return;
  }
  const VarCodec& c = reader_->codecs[v];
  {
    std::lock_guard<std::mutex> lock(nc_mutex());
    const size_t start[3] = {static_cast<size_t>(t), 0, 0};
    const size_t count[3] = {1, static_cast<size_t>(H_), static_cast<size_t>(W_)};
    const int st = nc_get_vara_float(reader_->ncid, c.varid, start, count, out);
    if (st != NC_NOERR) {
      throw_input("{}: cannot read variable '{}' at time index {}: {}", path_, variables_[v], t, nc_message(st));
    }
  }
  decode_field(c, out, HW, W_, *this, v, t);
}

void WeatherDataset::read_fields(int64_t t, float* out, bool normalised) const {
  if (t < 0 || t >= T_) throw_input("{}: time index {} is outside [0, {})", path_, t, T_);
  const int64_t HW = H_ * W_;
  for (int64_t v = 0; v < num_variables(); ++v) {
    float* p = out + v * HW;
    read_raw(v, t, p);
    if (normalised) {
      const double m = mean_[v], inv = 1.0 / std_[v];
      for (int64_t k = 0; k < HW; ++k) p[k] = static_cast<float>((p[k] - m) * inv);
    }
  }
}

WeatherStats WeatherDataset::compute_stats() const {
  WeatherStats s;
  s.variables = variables_;
  const int64_t HW = H_ * W_;
  std::vector<float> buf(static_cast<size_t>(HW));
  for (int64_t v = 0; v < num_variables(); ++v) {
    // Chan et al.'s merge of per-field (mean, M2): exact to double rounding for any T.
    double n = 0, mean = 0, m2 = 0;
    for (int64_t t = 0; t < T_; ++t) {
      read_raw(v, t, buf.data());
      double fm = 0;
      for (float x : buf) fm += x;
      fm /= static_cast<double>(HW);
      double fm2 = 0;
      for (float x : buf) fm2 += (x - fm) * (x - fm);
      const double nb = static_cast<double>(HW), d = fm - mean;
      const double nn = n + nb;
      mean += d * nb / nn;
      m2 += fm2 + d * d * n * nb / nn;
      n = nn;
    }
    s.mean.push_back(mean);
    s.std.push_back(std::sqrt(m2 / n));
  }
  return s;
}

void WeatherDataset::set_normalisation(const WeatherStats& stats) {
  if (stats.mean.size() != stats.variables.size() || stats.std.size() != stats.variables.size()) {
    throw_input("weather stats: {} variables but {} means and {} stds", stats.variables.size(), stats.mean.size(),
                stats.std.size());
  }
  std::vector<double> mean(variables_.size()), sd(variables_.size());
  for (size_t v = 0; v < variables_.size(); ++v) {
    auto it = std::find(stats.variables.begin(), stats.variables.end(), variables_[v]);
    if (it == stats.variables.end()) {
      std::string have;
      for (const auto& n : stats.variables) have += (have.empty() ? "" : ", ") + n;
      throw_input("{}: the normalisation stats have no variable '{}' (they have: {})", path_, variables_[v],
                  have.empty() ? "none" : have);
    }
    const size_t k = static_cast<size_t>(it - stats.variables.begin());
    if (!std::isfinite(stats.mean[k]) || !(stats.std[k] > 0) || !std::isfinite(stats.std[k])) {
      throw_input("{}: bad normalisation for '{}': mean {} std {} (std must be positive and finite)", path_,
                  variables_[v], stats.mean[k], stats.std[k]);
    }
    mean[v] = stats.mean[k];
    sd[v] = stats.std[k];
  }
  mean_ = std::move(mean);
  std_ = std::move(sd);
}

int64_t WeatherDataset::num_samples(int64_t lead_steps) const {
  if (lead_steps < 0) throw_input("{}: lead of {} steps is negative", path_, lead_steps);
  return std::max<int64_t>(0, T_ - lead_steps);
}

void WeatherDataset::sample(int64_t t, int64_t lead_steps, float* x, float* y) const {
  if (lead_steps < 0) throw_input("{}: lead of {} steps is negative", path_, lead_steps);
  if (lead_steps >= T_) {
    throw_input("{}: a lead of {} steps ({} h) is not shorter than the file's {} time steps", path_, lead_steps,
                lead_steps * step_hours_, T_);
  }
  if (t < 0 || t + lead_steps >= T_) {
    throw_input("{}: sample at time index {} with a lead of {} steps is outside the file's {} time steps "
                "(t must lie in [0, {}))",
                path_, t, lead_steps, T_, T_ - lead_steps);
  }
  read_fields(t, x, true);
  read_fields(t + lead_steps, y, true);
}

std::vector<float> WeatherDataset::climatology() const {
  const int64_t n = sample_size();
  std::vector<double> acc(static_cast<size_t>(n), 0.0);
  std::vector<float> buf(static_cast<size_t>(n));
  for (int64_t t = 0; t < T_; ++t) {
    read_fields(t, buf.data(), true);
    for (int64_t k = 0; k < n; ++k) acc[k] += buf[k];
  }
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) out[k] = static_cast<float>(acc[k] / static_cast<double>(T_));
  return out;
}

// ---- stats.json ----

void WeatherStats::save(const std::string& path, const std::string& source, const std::vector<std::string>& units,
                        const std::map<std::string, std::string>& about) const {
  nlohmann::json j;
  j["format"] = "weft-weather-stats";
  j["version"] = 1;
  if (!source.empty()) j["source"] = source;
  if (!about.empty()) j["about"] = about;
  j["variables"] = nlohmann::json::array();
  for (size_t v = 0; v < variables.size(); ++v) {
    nlohmann::json e = {{"name", variables[v]}, {"mean", mean.at(v)}, {"std", std.at(v)}};
    if (v < units.size()) e["units"] = units[v];
    j["variables"].push_back(std::move(e));
  }
  write_file_atomic(path, j.dump(2) + "\n");
}

WeatherStats WeatherStats::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_input("{}: cannot read weather stats", path);
  WeatherStats s;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.value("format", std::string()) != "weft-weather-stats") {
      throw_input("{}: not a weft weather stats file (format '{}')", path, j.value("format", std::string()));
    }
    for (const auto& e : j.at("variables")) {
      s.variables.push_back(e.at("name").get<std::string>());
      s.mean.push_back(e.at("mean").get<double>());
      s.std.push_back(e.at("std").get<double>());
      if (!std::isfinite(s.mean.back()) || !(s.std.back() > 0) || !std::isfinite(s.std.back())) {
        throw_input("{}: variable '{}' has mean {} std {} (std must be positive and finite)", path,
                    s.variables.back(), s.mean.back(), s.std.back());
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw_input("{}: bad weather stats: {}", path, e.what());
  }
  if (s.variables.empty()) throw_input("{}: weather stats list no variables", path);
  return s;
}

// ---- a prepared folder ----

WeatherFolder open_weather_folder(const std::string& dir, const std::vector<std::string>& variables) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec)) throw_input("{}: not a folder of weather files", dir);
  if (!fs::exists(d / "train.nc", ec)) throw_input("{}: no train.nc (the folder holds the splits train.nc, val.nc, test.nc)", dir);
  WeatherDataset train = WeatherDataset::open((d / "train.nc").string(), variables);
  auto split = [&](const char* name) -> std::optional<WeatherDataset> {
    const fs::path p = d / name;
    if (!fs::exists(p, ec)) return std::nullopt;
    WeatherDataset s = WeatherDataset::open(p.string(), train.variables());
    if (s.height() != train.height() || s.width() != train.width() || s.lat() != train.lat() || s.lon() != train.lon()) {
      throw_input("{}: grid {}x{} (lat {}..{}, lon {}..{}) differs from train.nc's {}x{} (lat {}..{}, lon {}..{})",
                  p.string(), s.height(), s.width(), s.lat().front(), s.lat().back(), s.lon().front(), s.lon().back(),
                  train.height(), train.width(), train.lat().front(), train.lat().back(), train.lon().front(),
                  train.lon().back());
    }
    if (std::abs(s.step_hours() - train.step_hours()) > 1e-6 * train.step_hours()) {
      throw_input("{}: time step {} h differs from train.nc's {} h", p.string(), s.step_hours(), train.step_hours());
    }
    return s;
  };
  std::optional<WeatherDataset> val = split("val.nc"), test = split("test.nc");  // before train moves
  WeatherFolder f{std::move(train), std::move(val), std::move(test), {}};
  const fs::path stats = d / "stats.json";
  f.stats = fs::exists(stats, ec) ? WeatherStats::load(stats.string()) : f.train.compute_stats();
  f.train.set_normalisation(f.stats);
  if (f.val) f.val->set_normalisation(f.stats);
  if (f.test) f.test->set_normalisation(f.stats);
  return f;
}

// ---- sampler ----

struct WeatherSampler::Cache {
  std::mutex m;
  int64_t epoch = -1;
  std::shared_ptr<const std::vector<int64_t>> perm;
};

WeatherSampler::WeatherSampler(int64_t num_times, double step_hours, std::vector<double> lead_hours, uint64_t seed)
    : lead_hours_(std::move(lead_hours)), seed_(seed), cache_(std::make_unique<Cache>()) {
  if (lead_hours_.empty()) throw_input("weather sampler: no lead times given");
  if (!(step_hours > 0)) throw_input("weather sampler: the time step {} h is not positive", step_hours);
  int64_t max_steps = 0;
  for (double h : lead_hours_) {
    const double steps = h / step_hours;
    const int64_t k = static_cast<int64_t>(std::llround(steps));
    if (!(h > 0) || !std::isfinite(h) || std::abs(steps - static_cast<double>(k)) > 1e-9 * std::max(1.0, steps)) {
      throw_input("weather sampler: lead time {} h is not a positive multiple of the data's {} h step", h, step_hours);
    }
    lead_steps_.push_back(k);
    max_steps = std::max(max_steps, k);
  }
  n_ = num_times - max_steps;
  if (n_ <= 0) {
    throw_input("weather sampler: a lead of {} h ({} steps of {} h) needs more than the {} time steps of the data",
                max_steps * step_hours, max_steps, step_hours, num_times);
  }
}

WeatherSampler::WeatherSampler(WeatherSampler&&) noexcept = default;
WeatherSampler::~WeatherSampler() = default;

WeatherSampler::Draw WeatherSampler::draw(int64_t i) const {
  if (i < 0) throw_input("weather sampler: global sample index {} is negative", i);
  const int64_t epoch = i / n_;
  std::shared_ptr<const std::vector<int64_t>> perm;
  {
    std::lock_guard<std::mutex> lock(cache_->m);
    if (cache_->epoch != epoch) {
      cache_->perm = std::make_shared<const std::vector<int64_t>>(epoch_permutation(seed_, epoch, n_));
      cache_->epoch = epoch;
    }
    perm = cache_->perm;
  }
  const uint32_t w = Philox::draw(seed_, kRngStreamWeatherLead, static_cast<uint64_t>(i))[0];
  const size_t k = static_cast<size_t>((static_cast<uint64_t>(w) * lead_steps_.size()) >> 32);
  Draw d;
  d.t = (*perm)[static_cast<size_t>(i % n_)];
  d.lead_steps = lead_steps_[k];
  d.lead_hours = lead_hours_[k];
  return d;
}

void weather_sample_batch(const WeatherDataset& ds, const WeatherSampler& sampler, int64_t step, int64_t global_batch,
                          int64_t first, int64_t count, float* x, float* y, float* lead_hours) {
  if (step < 0) throw_input("weather batch: step {} is negative", step);
  if (global_batch <= 0) throw_input("weather batch: global batch {} must be positive", global_batch);
  if (first < 0 || count < 0 || first > global_batch - count) {
    throw_input("weather batch: samples [{}, {}) are outside the global batch [0, {})", first, first + count,
                global_batch);
  }
  const int64_t n = ds.sample_size();
  for (int64_t s = 0; s < count; ++s) {
    const WeatherSampler::Draw d = sampler.draw(step * global_batch + first + s);
    ds.sample(d.t, d.lead_steps, x + s * n, y + s * n);
    if (lead_hours) lead_hours[s] = static_cast<float>(d.lead_hours);
  }
}

// ---- metrics ----

namespace {
template <typename F>
std::vector<float> lat_weights_impl(const std::vector<F>& lat_deg) {
  if (lat_deg.empty()) throw_input("latitude weights: no latitudes");
  std::vector<double> c(lat_deg.size());
  double sum = 0;
  for (size_t j = 0; j < lat_deg.size(); ++j) {
    const double l = static_cast<double>(lat_deg[j]);
    if (!(l >= -90.0 && l <= 90.0)) throw_input("latitude weights: latitude {} at index {} is outside [-90, 90]", l, j);
    c[j] = std::cos(l * M_PI / 180.0);
    sum += c[j];
  }
  if (!(sum > 0)) throw_input("latitude weights: every latitude is a pole");
  const double mean = sum / static_cast<double>(c.size());
  std::vector<float> w(c.size());
  for (size_t j = 0; j < c.size(); ++j) w[j] = static_cast<float>(c[j] / mean);
  return w;
}
}  // namespace

std::vector<float> latitude_weights(const std::vector<double>& lat_deg) { return lat_weights_impl(lat_deg); }
std::vector<float> latitude_weights(const std::vector<float>& lat_deg) { return lat_weights_impl(lat_deg); }

std::vector<double> lat_weighted_rmse(const float* pred, const float* truth, int64_t V, int64_t H, int64_t W,
                                      const std::vector<float>& weights) {
  if (static_cast<int64_t>(weights.size()) != H) {
    throw_input("lat-weighted RMSE: {} weights for {} latitudes", weights.size(), H);
  }
  std::vector<double> out(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) {
    double acc = 0;
    for (int64_t j = 0; j < H; ++j) {
      double row = 0;
      const int64_t o = (v * H + j) * W;
      for (int64_t i = 0; i < W; ++i) {
        const double d = static_cast<double>(pred[o + i]) - truth[o + i];
        row += d * d;
      }
      acc += weights[j] * row;
    }
    out[v] = std::sqrt(acc / static_cast<double>(H * W));
  }
  return out;
}

std::vector<double> persistence_rmse(const WeatherDataset& ds, int64_t lead_steps) {
  const int64_t n = ds.num_samples(lead_steps);
  if (n <= 0 || lead_steps >= ds.num_times()) {
    throw_input("{}: no sample with a lead of {} steps in {} time steps", ds.path(), lead_steps, ds.num_times());
  }
  const std::vector<float> w = latitude_weights(ds.lat());
  std::vector<float> x(static_cast<size_t>(ds.sample_size())), y(x.size());
  std::vector<double> acc(static_cast<size_t>(ds.num_variables()), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    ds.sample(t, lead_steps, x.data(), y.data());
    const auto r = lat_weighted_rmse(x.data(), y.data(), ds.num_variables(), ds.height(), ds.width(), w);
    for (size_t v = 0; v < acc.size(); ++v) acc[v] += r[v];
  }
  for (double& a : acc) a /= static_cast<double>(n);
  return acc;
}

std::vector<double> climatology_rmse(const WeatherDataset& ds, const std::vector<float>& climatology,
                                     int64_t lead_steps) {
  if (static_cast<int64_t>(climatology.size()) != ds.sample_size()) {
    throw_input("{}: the climatology has {} values, a sample {} (V={}, H={}, W={})", ds.path(), climatology.size(),
                ds.sample_size(), ds.num_variables(), ds.height(), ds.width());
  }
  const int64_t n = ds.num_samples(lead_steps);
  if (n <= 0 || lead_steps >= ds.num_times()) {
    throw_input("{}: no sample with a lead of {} steps in {} time steps", ds.path(), lead_steps, ds.num_times());
  }
  const std::vector<float> w = latitude_weights(ds.lat());
  std::vector<float> y(static_cast<size_t>(ds.sample_size()));
  std::vector<double> acc(static_cast<size_t>(ds.num_variables()), 0.0);
  for (int64_t t = lead_steps; t < ds.num_times(); ++t) {
    ds.read_fields(t, y.data(), true);
    const auto r = lat_weighted_rmse(climatology.data(), y.data(), ds.num_variables(), ds.height(), ds.width(), w);
    for (size_t v = 0; v < acc.size(); ++v) acc[v] += r[v];
  }
  for (double& a : acc) a /= static_cast<double>(n);
  return acc;
}

// ---- writer ----

namespace {
// A write that failed: netCDF says only "HDF error" for a full disk, so the free space is named.
[[noreturn]] void throw_nc(const std::string& path, const char* what, int st) {
  throw_runtime("{}: cannot {}: {} ({})", path, what, nc_message(st), free_space_note(path));
}
void check_nc(int st, const std::string& path, const char* what) {
  if (st != NC_NOERR) throw_nc(path, what, st);
}
void put_text(int ncid, int varid, const char* name, const std::string& value, const std::string& path) {
  check_nc(nc_put_att_text(ncid, varid, name, value.size(), value.c_str()), path, "write an attribute");
}
}  // namespace

WeatherWriter::WeatherWriter(const std::string& path, const std::vector<double>& lat, const std::vector<double>& lon,
                             const std::vector<WeatherVariableInfo>& variables, const std::string& time_units,
                             const std::map<std::string, std::string>& global_attributes)
    : path_(path), H_(static_cast<int64_t>(lat.size())), W_(static_cast<int64_t>(lon.size())) {
  static std::atomic<int> counter{0};
  tmp_ = fmt::format("{}.tmp-{}-{}", path, ::getpid(), counter++);
  std::lock_guard<std::mutex> lock(nc_mutex());
  int st = nc_create(tmp_.c_str(), NC_NETCDF4 | NC_CLOBBER, &ncid_);
  if (st != NC_NOERR) {
    ncid_ = -1;
    std::error_code ec;
    fs::remove(tmp_, ec);  // HDF5 may have created it before it failed to write its header
    throw_nc(tmp_, "create the file", st);
  }
  register_signal_cleanup(tmp_);  // a signal during the writing removes it (SignalCleanupScope)
  try {
    int old = 0;
    nc_set_fill(ncid_, NC_NOFILL, &old);
    int dt = -1, dlat = -1, dlon = -1;
    check_nc(nc_def_dim(ncid_, "time", NC_UNLIMITED, &dt), tmp_, "define time");
    check_nc(nc_def_dim(ncid_, "lat", lat.size(), &dlat), tmp_, "define lat");
    check_nc(nc_def_dim(ncid_, "lon", lon.size(), &dlon), tmp_, "define lon");
    int vlat = -1, vlon = -1;
    check_nc(nc_def_var(ncid_, "time", NC_DOUBLE, 1, &dt, &time_var_), tmp_, "define time");
    put_text(ncid_, time_var_, "units", time_units, tmp_);
    put_text(ncid_, time_var_, "long_name", "time", tmp_);
    put_text(ncid_, time_var_, "standard_name", "time", tmp_);
    put_text(ncid_, time_var_, "calendar", "proleptic_gregorian", tmp_);
    put_text(ncid_, time_var_, "axis", "T", tmp_);
    check_nc(nc_def_var(ncid_, "lat", NC_DOUBLE, 1, &dlat, &vlat), tmp_, "define lat");
    put_text(ncid_, vlat, "units", "degrees_north", tmp_);
    put_text(ncid_, vlat, "long_name", "latitude", tmp_);
    put_text(ncid_, vlat, "standard_name", "latitude", tmp_);
    put_text(ncid_, vlat, "axis", "Y", tmp_);
    check_nc(nc_def_var(ncid_, "lon", NC_DOUBLE, 1, &dlon, &vlon), tmp_, "define lon");
    put_text(ncid_, vlon, "units", "degrees_east", tmp_);
    put_text(ncid_, vlon, "long_name", "longitude", tmp_);
    put_text(ncid_, vlon, "standard_name", "longitude", tmp_);
    put_text(ncid_, vlon, "axis", "X", tmp_);
    const int dims[3] = {dt, dlat, dlon};
    const size_t chunk[3] = {1, lat.size(), lon.size()};
    for (const WeatherVariableInfo& v : variables) {
      int id = -1;
      check_nc(nc_def_var(ncid_, v.name.c_str(), NC_FLOAT, 3, dims, &id), tmp_, "define a variable");
      check_nc(nc_def_var_chunking(ncid_, id, NC_CHUNKED, chunk), tmp_, "set chunking");
      if (!v.units.empty()) put_text(ncid_, id, "units", v.units, tmp_);
      if (!v.long_name.empty()) put_text(ncid_, id, "long_name", v.long_name, tmp_);
      var_ids_.push_back(id);
    }
    put_text(ncid_, NC_GLOBAL, "Conventions", "CF-1.8", tmp_);
    for (const auto& [k, v] : global_attributes) put_text(ncid_, NC_GLOBAL, k.c_str(), v, tmp_);
    check_nc(nc_enddef(ncid_), tmp_, "finish the header");
    check_nc(nc_put_var_double(ncid_, vlat, lat.data()), tmp_, "write lat");
    check_nc(nc_put_var_double(ncid_, vlon, lon.data()), tmp_, "write lon");
  } catch (...) {
    nc_abort(ncid_);  // an abandoned file: nothing flushed (see close())
    ncid_ = -1;
    std::error_code ec;
    fs::remove(tmp_, ec);
    unregister_signal_cleanup(tmp_);
    throw;
  }
}

WeatherWriter::~WeatherWriter() {
  if (ncid_ >= 0) {
    std::lock_guard<std::mutex> lock(nc_mutex());
    nc_abort(ncid_);  // abandoned (an append failed, or the caller threw): nothing flushed
    std::error_code ec;
    fs::remove(tmp_, ec);
    unregister_signal_cleanup(tmp_);
  }
}

void WeatherWriter::append(double time_value, const float* fields) {
  WEFT_CHECK(ncid_ >= 0, "append to closed weather file {}", path_);
  std::lock_guard<std::mutex> lock(nc_mutex());
  const size_t t = static_cast<size_t>(t_);
  check_nc(nc_put_var1_double(ncid_, time_var_, &t, &time_value), tmp_, "write time");
  const size_t start[3] = {t, 0, 0};
  const size_t count[3] = {1, static_cast<size_t>(H_), static_cast<size_t>(W_)};
  for (size_t v = 0; v < var_ids_.size(); ++v) {
    check_nc(nc_put_vara_float(ncid_, var_ids_[v], start, count, fields + v * H_ * W_), tmp_, "write a field");
  }
  ++t_;
}

void WeatherWriter::close() {
  WEFT_CHECK(ncid_ >= 0, "weather file {} closed twice", path_);
  std::lock_guard<std::mutex> lock(nc_mutex());
  const int st = nc_close(ncid_);
  // A close that failed (a full disk while HDF5 flushes) leaves netCDF-4's file open (its sync
  // failed before the HDF5 close), and HDF5's exit handler then crashes on it: abort it, which
  // closes without flushing again.
  if (st != NC_NOERR) nc_abort(ncid_);
  ncid_ = -1;
  std::error_code ec;
  if (st != NC_NOERR) {
    fs::remove(tmp_, ec);
    unregister_signal_cleanup(tmp_);
    throw_nc(tmp_, "close the file", st);
  }
  fs::rename(tmp_, path_, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp_, ec);
    unregister_signal_cleanup(tmp_);
    throw_runtime("{}: cannot rename {} to it: {}", path_, tmp_, why);
  }
  unregister_signal_cleanup(tmp_);
}

}  // namespace weft
