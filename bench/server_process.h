// Copyright rpcguard authors.
//
// ServerProcess: the fault server (//tests/testing:fault_server_main) run as a
// separate process, so that a benchmark's client CPU and memory figures never
// include the server's.
//
//   absl::StatusOr<std::unique_ptr<ServerProcess>> server =
//       ServerProcess::Start(path);
//   ... connect to (*server)->address() ...
//   (*server)->Stop();  // or let the destructor do it
//
// The server is sent SIGTERM when Stop() is called, when the ServerProcess is
// destroyed, when the benchmark process exits normally (atexit), and by the
// kernel when the benchmark process dies any other way (PR_SET_PDEATHSIG).
// Start the main server before any gRPC object exists: fork() copies the
// process as it is. A server the benchmark kills and starts again on its
// port (Kill(), then Start(path, port)) is forked with gRPC's threads
// running, which is safe because the child makes only async-signal-safe
// calls before exec.

#ifndef RPCGUARD_BENCH_SERVER_PROCESS_H_
#define RPCGUARD_BENCH_SERVER_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rpcguard {
namespace bench {

class ServerProcess {
 public:
  // Starts the server binary at `path` with `--port=PORT` (0: an ephemeral
  // port) and waits up to `timeout` for its "listening on ADDRESS" line on
  // stdout. The kernel sends the server SIGTERM when the calling thread
  // ends (PR_SET_PDEATHSIG), so call it from a thread that outlives the
  // server. Errors: Internal when it cannot be started, DeadlineExceeded
  // when it does not say where it listens in time (it is killed then).
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::string& path, int port = 0,
      absl::Duration timeout = absl::Seconds(20));

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ~ServerProcess();

  // "127.0.0.1:PORT".
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }

  // The server's resident set size in KiB (VmRSS), or -1 once it is gone.
  int64_t RssKib() const;

  // Sends SIGTERM and waits for the exit (SIGKILL after 10 s). Returns an
  // error when the server did not exit cleanly. Idempotent.
  absl::Status Stop();

  // Sends SIGKILL and reaps the server: a crash, for the restart scenario.
  // Idempotent.
  void Kill();

 private:
  ServerProcess(pid_t pid, int stdout_fd) : pid_(pid), stdout_fd_(stdout_fd) {}

  pid_t pid_;
  int stdout_fd_;
  std::string address_;
};

// VmRSS of process `pid` in KiB (0: this process), or -1 when unreadable.
int64_t ReadRssKib(pid_t pid = 0);

// Where the fault server binary is: the runfiles of the running binary
// (`argv0` is its argv[0]). Empty when it cannot be found.
std::string FindFaultServer(const char* argv0);

}  // namespace bench
}  // namespace rpcguard

#endif  // RPCGUARD_BENCH_SERVER_PROCESS_H_
