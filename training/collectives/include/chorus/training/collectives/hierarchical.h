// Collectives for ranks on several hosts: inside a host, ranks are
// interpreters of one process and use the in-process communicator (no copy
// through a transport); across hosts, each local rank talks over c10d (Gloo
// here) with the ranks of the same local index on the other hosts, as HSDP
// lays them out. Hosts meet through a Rendezvous (c10d's TCPStore).
//
//   auto store = Rendezvous::Connect("10.0.0.1", 29400, /*serve=*/host == 0, hosts, timeout);
//   auto cross = CreateGlooCommunicator(*store, "job7/local" + std::to_string(l), host, hosts);
//   auto rank = CreateHierarchicalCommunicator(local_group->Rank(l), *cross);
//
// Global rank = host * local_size + local rank. The hierarchical collectives
// give what a flat group of all the ranks gives (reductions in another
// order: equal up to float rounding), and move across hosts only what the
// layout needs (HierarchicalCommunicator::cross_host_bytes).
#ifndef CHORUS_TRAINING_COLLECTIVES_HIERARCHICAL_H_
#define CHORUS_TRAINING_COLLECTIVES_HIERARCHICAL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/training/collectives/communicator.h"

namespace chorus {

// A key-value store every host of a job reaches: c10d's TCPStore. The first
// host serves it; the others connect. Thread-safe; shared by every group of
// the job (each under its own name).
class Rendezvous {
 public:
  // Serves (when `serve`; port 0 picks a free port) or connects to the store
  // at host:port, waiting up to `timeout` for it. DEADLINE_EXCEEDED or
  // UNAVAILABLE when it cannot be reached.
  static StatusOr<std::shared_ptr<Rendezvous>> Connect(const std::string& host, int port,
                                                       bool serve,
                                                       std::chrono::milliseconds timeout);
  virtual ~Rendezvous() = default;
  // The port the store listens on.
  virtual int port() const = 0;
};

// Rank `rank` of `size` over Gloo, meeting the others under `name` in
// `rendezvous` (a name per group: several groups share one store). Blocks
// until every rank has joined; DEADLINE_EXCEEDED after options.timeout.
StatusOr<std::shared_ptr<Communicator>> CreateGlooCommunicator(
    Rendezvous& rendezvous, const std::string& name, int rank, int size,
    const CommunicatorOptions& options = {});

class HierarchicalCommunicator : public Communicator {
 public:
  // Bytes this rank has sent to other hosts, as the transport's ring
  // algorithms move them.
  virtual int64_t cross_host_bytes() const = 0;
  virtual int host() const = 0;
  virtual int hosts() const = 0;
  // This host's group, and this local rank's group across hosts (whose
  // traffic counts in cross_host_bytes): HSDP shards parameters over the
  // first and averages gradients over the second.
  virtual std::shared_ptr<Communicator> local() const = 0;
  virtual std::shared_ptr<Communicator> cross() const = 0;
};

// Rank (host = cross.rank(), local = local.rank()) of hosts x local ranks.
// `local` joins this host's ranks; `cross` this local rank's peers on every
// host, ordered by host. Every host has the same number of local ranks.
StatusOr<std::shared_ptr<HierarchicalCommunicator>> CreateHierarchicalCommunicator(
    std::shared_ptr<Communicator> local, std::shared_ptr<Communicator> cross);

// Every rank of `hosts` x `local_ranks` in this process, hosts simulated: an
// in-process group each, joined across over Gloo through a rendezvous on
// loopback (tests and benchmarks of the hierarchy on one machine). Indexed by
// global rank.
StatusOr<std::vector<std::shared_ptr<HierarchicalCommunicator>>> CreateSimulatedHosts(
    int hosts, int local_ranks, const CommunicatorOptions& options = {});

}  // namespace chorus

#endif  // CHORUS_TRAINING_COLLECTIVES_HIERARCHICAL_H_
