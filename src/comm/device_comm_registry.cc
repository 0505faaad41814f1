#include "comm/device_comm_registry.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "comm/device_comm.h"
#include "core/error.h"

namespace weft {
namespace {

struct Entry {
  std::string name;
  DeviceCommInfo info;
  DeviceCommFactory factory;
};

struct Registry {
  std::mutex mu;
  std::vector<Entry> entries{
      {"mpi", {}, [](Communicator& host, Backend& be) { return std::make_unique<DeviceCommunicator>(host, be); }},
  };
};

Registry& registry() {
  static Registry r;
  return r;
}

bool takes(const DeviceCommInfo& info, const std::string& backend) {
  return info.backends.empty() || std::find(info.backends.begin(), info.backends.end(), backend) != info.backends.end();
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// A copy of the entry `name`, if registered.
bool find_entry(const std::string& name, Entry* out) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const Entry& e : r.entries) {
    if (e.name == name) {
      *out = e;
      return true;
    }
  }
  return false;
}

}  // namespace

void register_device_comm(const std::string& name, DeviceCommInfo info, DeviceCommFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (Entry& e : r.entries) {
    if (e.name == name) {
      e.info = std::move(info);
      e.factory = std::move(factory);
      return;
    }
  }
  r.entries.push_back({name, std::move(info), std::move(factory)});
}

std::vector<std::string> device_comm_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const Entry& e : r.entries) names.push_back(e.name);
  return names;
}

std::string default_device_comm(const std::string& backend) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const Entry& e : r.entries) {
    if (e.info.preferred && !e.info.backends.empty() && takes(e.info, backend)) return e.name;
  }
  return "mpi";
}

void check_device_comm(const std::string& comm, const std::string& backend) {
  Entry e;
  if (!find_entry(comm, &e)) {
    const std::string known = joined(device_comm_names());
    if (comm == "nccl") {
      throw_input("communicator 'nccl' is not in this build (known: {}); build weft with -DWEFT_CUDA=ON and use it "
                  "with --backend cuda",
                  known);
    }
    throw_input("unknown communicator '{}' (known: {})", comm, known);
  }
  if (!takes(e.info, backend)) {
    throw_input("communicator '{}' works with backend {} only, not '{}'; use --comm mpi (host-staged) with backend '{}'",
                comm, joined(e.info.backends), backend, backend);
  }
}

DeviceCommInfo device_comm_info(const std::string& comm, const std::string& backend) {
  const std::string name = comm.empty() ? default_device_comm(backend) : comm;
  check_device_comm(name, backend);
  Entry e;
  find_entry(name, &e);
  return e.info;
}

std::unique_ptr<DeviceComm> make_device_comm(const std::string& comm, Communicator& host, Backend& be) {
  const std::string name = comm.empty() ? default_device_comm(be.name()) : comm;
  check_device_comm(name, be.name());
  Entry e;
  find_entry(name, &e);
  return e.factory(host, be);
}

}  // namespace weft
