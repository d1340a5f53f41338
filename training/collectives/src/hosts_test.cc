// Hierarchical collectives between real processes, one per host: this binary
// re-run per host (HostChild), each with two local ranks (threads, an
// in-process group) and Gloo across hosts through a TCPStore rendezvous.
// Once on loopback, and once with each host in its own network namespace,
// joined by a veth pair the test makes (each host its own address), so
// nothing reaches the other host but through the network. A host killed
// mid-run makes the other's collective fail within the timeout.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "chorus/training/collectives/hierarchical.h"

namespace chorus {
namespace {

constexpr int kHosts = 2;
constexpr int kLocal = 2;
constexpr int kWorld = kHosts * kLocal;
constexpr int kSteps = 12;
constexpr int64_t kElements = 1001;  // uneven chunks

std::string Env(const char* name, const char* otherwise = "") {
  const char* value = std::getenv(name);
  return value != nullptr ? value : otherwise;
}

at::Tensor Input(int g, int step) {
  return at::arange(kElements, at::kFloat) * (g + 1) + step - 2 * g;
}

// One host's ranks: `steps` reduce-scatters and all-gathers of 1001 floats,
// each checked against the sum over all four ranks. Returns the first error.
Status RunHost(int host, int die_at_step) {
  CommunicatorOptions options;
  options.timeout = std::chrono::milliseconds(std::stoi(Env("CHORUS_TIMEOUT_MS", "20000")));
  options.gloo_host = Env("CHORUS_GLOO_HOST", "127.0.0.1");
  CHORUS_ASSIGN_OR_RETURN(
      std::shared_ptr<Rendezvous> rendezvous,
      Rendezvous::Connect(Env("CHORUS_RENDEZVOUS_HOST"), std::stoi(Env("CHORUS_RENDEZVOUS_PORT")),
                          host == 0, options.timeout));
  auto group = InProcessGroup::Create(kLocal, options);
  std::vector<Status> results(kLocal);
  std::vector<int64_t> bytes(kLocal);
  std::vector<std::thread> threads;
  for (int local = 0; local < kLocal; ++local) {
    threads.emplace_back([&, local] {
      results[local] = [&]() -> Status {
        CHORUS_ASSIGN_OR_RETURN(
            std::shared_ptr<Communicator> cross,
            CreateGlooCommunicator(*rendezvous, "hosts/local" + std::to_string(local), host, kHosts,
                                   options));
        CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<HierarchicalCommunicator> rank,
                                CreateHierarchicalCommunicator(group->Rank(local), cross));
        const int g = rank->rank();
        auto [begin, end] = ChunkBounds(kElements, kWorld, g);
        for (int step = 0; step < kSteps; ++step) {
          if (step == die_at_step) kill(getpid(), SIGKILL);  // the host is lost
          at::Tensor expected = at::zeros({kElements});
          for (int r = 0; r < kWorld; ++r) expected += Input(r, step);
          at::Tensor chunk = at::empty({end - begin});
          CHORUS_RETURN_IF_ERROR(rank->ReduceScatter(Input(g, step), chunk, ReduceOp::kSum));
          if (!at::equal(chunk, expected.narrow(0, begin, end - begin))) {
            return InternalError("reduce_scatter gave another sum at step " + std::to_string(step));
          }
          at::Tensor gathered = at::empty({kElements * kWorld});
          CHORUS_RETURN_IF_ERROR(rank->AllGather(Input(g, step), gathered));
          for (int r = 0; r < kWorld; ++r) {
            if (!at::equal(gathered.narrow(0, r * kElements, kElements), Input(r, step))) {
              return InternalError("all_gather gave another tensor at step " +
                                   std::to_string(step));
            }
          }
        }
        bytes[local] = rank->cross_host_bytes();
        return rank->Barrier();
      }();
    });
  }
  for (auto& thread : threads) thread.join();
  for (const Status& status : results) CHORUS_RETURN_IF_ERROR(status);
  std::printf("host %d cross_host_bytes %lld\n", host, static_cast<long long>(bytes[0]));
  return OkStatus();
}

// The child: exits 0 when its collectives were right, 3 when they failed
// with a timeout or an abort (a lost peer), 4 otherwise.
TEST(HostChild, Run) {
  if (Env("CHORUS_HOST_CHILD").empty()) GTEST_SKIP() << "run by HostsTest";
  const int host = std::stoi(Env("CHORUS_HOST_INDEX"));
  const int die_at = std::stoi(Env("CHORUS_DIE_AT_STEP", "-1"));
  Status status = RunHost(host, die_at);
  if (!status.ok()) std::printf("host %d failed: %s\n", host, status.ToString().c_str());
  std::fflush(stdout);
  const bool lost_peer =
      status.code() == StatusCode::kDeadlineExceeded || status.code() == StatusCode::kAborted;
  std::_Exit(status.ok() ? 0 : lost_peer ? 3 : 4);
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

struct Host {
  pid_t pid = -1;
  std::string output_path;
};

// Starts host `index` (in network namespace `netns`, unless empty), its
// output to a file.
Host StartHost(int index, const std::string& netns, const std::string& rendezvous_host, int port,
               const std::string& gloo_host, int die_at_step, int timeout_ms) {
  Host host;
  host.output_path = ::testing::TempDir() + "host" + std::to_string(index) + "-" +
                     std::to_string(getpid()) + ".out";
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  self[length > 0 ? length : 0] = '\0';
  host.pid = fork();
  if (host.pid == 0) {
    setenv("CHORUS_HOST_CHILD", "1", 1);
    setenv("CHORUS_HOST_INDEX", std::to_string(index).c_str(), 1);
    setenv("CHORUS_RENDEZVOUS_HOST", rendezvous_host.c_str(), 1);
    setenv("CHORUS_RENDEZVOUS_PORT", std::to_string(port).c_str(), 1);
    setenv("CHORUS_GLOO_HOST", gloo_host.c_str(), 1);
    setenv("CHORUS_DIE_AT_STEP", std::to_string(die_at_step).c_str(), 1);
    setenv("CHORUS_TIMEOUT_MS", std::to_string(timeout_ms).c_str(), 1);
    if (!freopen(host.output_path.c_str(), "w", stdout)) _exit(5);
    dup2(fileno(stdout), 2);
    const char* filter = "--gtest_filter=HostChild.Run";
    if (netns.empty()) {
      execl(self, self, filter, nullptr);
    } else {
      execlp("ip", "ip", "netns", "exec", netns.c_str(), self, filter, nullptr);
    }
    _exit(6);
  }
  return host;
}

int Wait(const Host& host) {
  int status = 0;
  waitpid(host.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string Output(const Host& host) {
  std::string text;
  if (FILE* file = std::fopen(host.output_path.c_str(), "r")) {
    char buffer[4096];
    size_t read;
    while ((read = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, read);
    std::fclose(file);
  }
  return text;
}

TEST(HostsTest, TwoProcessesOnLoopbackGiveTheSumsOfAllFourRanks) {
  const int port = FreePort();
  std::vector<Host> hosts;
  for (int h = 0; h < kHosts; ++h) {
    hosts.push_back(StartHost(h, "", "127.0.0.1", port, "127.0.0.1", -1, 20000));
  }
  for (const Host& host : hosts) EXPECT_EQ(Wait(host), 0) << Output(host);
  // Per step a rank moves its share across: reduce-scatter 2 (H-1) C and
  // all-gather (H-1) n floats (C = ceil(1001 / 4) = 251, n = 1001).
  const long long expected = kSteps * (2 * 251 + 1001) * 4;
  EXPECT_NE(Output(hosts[0]).find("cross_host_bytes " + std::to_string(expected)),
            std::string::npos)
      << Output(hosts[0]);
}

// Two network namespaces joined by a veth pair: 10.213.0.1 (host 0, which
// serves the rendezvous) and 10.213.0.2 (host 1).
class NetworkNamespaces {
 public:
  NetworkNamespaces() {
    const std::string suffix = std::to_string(getpid() % 100000);
    names_ = {"chorus-h0-" + suffix, "chorus-h1-" + suffix};
    const std::string a = "chv0-" + suffix, b = "chv1-" + suffix;
    const std::vector<std::string> commands = {
        "ip netns add " + names_[0],
        "ip netns add " + names_[1],
        "ip link add " + a + " netns " + names_[0] + " type veth peer name " + b + " netns " +
            names_[1],
        "ip -n " + names_[0] + " addr add 10.213.0.1/24 dev " + a,
        "ip -n " + names_[1] + " addr add 10.213.0.2/24 dev " + b,
        "ip -n " + names_[0] + " link set " + a + " up",
        "ip -n " + names_[1] + " link set " + b + " up",
        "ip -n " + names_[0] + " link set lo up",
        "ip -n " + names_[1] + " link set lo up",
    };
    for (const std::string& command : commands) {
      if (std::system((command + " 2>/dev/null").c_str()) != 0) {
        why_not_ = "`" + command + "` failed (network namespaces need root and iproute2)";
        return;
      }
    }
    ready_ = true;
  }
  ~NetworkNamespaces() {
    for (const std::string& name : names_) {
      (void)std::system(("ip netns del " + name + " 2>/dev/null").c_str());
    }
  }
  bool ready() const { return ready_; }
  const std::string& why_not() const { return why_not_; }
  const std::string& name(int host) const { return names_[host]; }

 private:
  std::vector<std::string> names_;
  bool ready_ = false;
  std::string why_not_;
};

TEST(HostsTest, TwoHostsInTheirOwnNetworkNamespaces) {
  NetworkNamespaces namespaces;
  if (!namespaces.ready()) GTEST_SKIP() << namespaces.why_not() << ": ran on loopback only";
  std::vector<Host> hosts;
  for (int h = 0; h < kHosts; ++h) {
    hosts.push_back(StartHost(h, namespaces.name(h), "10.213.0.1", 29431,
                              h == 0 ? "10.213.0.1" : "10.213.0.2", -1, 20000));
  }
  for (const Host& host : hosts) EXPECT_EQ(Wait(host), 0) << Output(host);
  RecordProperty("ran", "network namespaces");
}

TEST(HostsTest, AHostKilledMidRunFailsTheOtherWithinTheTimeout) {
  NetworkNamespaces namespaces;  // where it can, as separate machines would be
  const bool isolated = namespaces.ready();
  const int port = isolated ? 29432 : FreePort();
  const auto started = std::chrono::steady_clock::now();
  std::vector<Host> hosts;
  for (int h = 0; h < kHosts; ++h) {
    const std::string address = isolated ? "10.213.0." + std::to_string(h + 1) : "127.0.0.1";
    hosts.push_back(StartHost(h, isolated ? namespaces.name(h) : "",
                              isolated ? "10.213.0.1" : "127.0.0.1", port, address, h == 1 ? 5 : -1,
                              3000));
  }
  EXPECT_EQ(Wait(hosts[1]), 128 + SIGKILL);
  EXPECT_EQ(Wait(hosts[0]), 3) << Output(hosts[0]);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(waited, 20.0);
  EXPECT_NE(Output(hosts[0]).find("across hosts (host 0 of 2)"), std::string::npos)
      << Output(hosts[0]);
  if (isolated) {  // Gloo's error names the lost host's address
    EXPECT_NE(Output(hosts[0]).find("10.213.0.2"), std::string::npos) << Output(hosts[0]);
  }
  RecordProperty("ran", isolated ? "network namespaces" : "loopback");
  RecordProperty("failure_seen_after_s", std::to_string(waited));
}

}  // namespace
}  // namespace chorus
