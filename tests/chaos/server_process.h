// Copyright rpcguard authors.
//
// ServerProcess: the fault server (//tests/testing:fault_server_main) as a
// child process that a test can kill with SIGKILL and start again on the same
// port, so the client sees what it sees in production: connections reset,
// a port that refuses connections, a server that comes back empty.

#ifndef RPCGUARD_TESTS_CHAOS_SERVER_PROCESS_H_
#define RPCGUARD_TESTS_CHAOS_SERVER_PROCESS_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace rpcguard {
namespace testing {

class ServerProcess {
 public:
  // `binary`: the path of fault_server_main.
  explicit ServerProcess(std::string binary);
  ~ServerProcess();  // kills the child if it still runs
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts the server on 127.0.0.1:`port` (0: an ephemeral port, the first
  // time) and waits until it prints that it listens, for at most `timeout`.
  // Must be called from a thread that lives as long as the child: the child
  // asks the kernel to kill it when that thread ends (PR_SET_PDEATHSIG), so a
  // crashed test leaves no server behind.
  absl::Status Start(int port, absl::Duration timeout = absl::Seconds(10));

  // SIGKILL, then reaps the child. No-op when it is not running.
  void Kill();

  // SIGTERM (the server shuts down cleanly), then reaps it; SIGKILL after
  // `timeout`.
  void Stop(absl::Duration timeout = absl::Seconds(5));

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // The port it listens on (kept across restarts).
  int port() const { return port_; }
  std::string address() const;

 private:
  void Reap();

  const std::string binary_;
  pid_t pid_ = -1;
  int port_ = 0;
  int stdout_fd_ = -1;
};

// The path of a data dependency in the test's runfiles, e.g.
// "tests/testing/fault_server_main".
std::string RunfilesPath(const std::string& workspace_relative);

}  // namespace testing
}  // namespace rpcguard

#endif  // RPCGUARD_TESTS_CHAOS_SERVER_PROCESS_H_
