// Copyright rpcguard authors.
//
// What rpcguard reads and writes of gRPC 1.51's ClientContext beyond the
// public API (internal/grpc_1_51/context.h), and the watch on a parent call
// (internal/grpc/parent_watch.h), against real calls on a real server. These
// tests are meant to break loudly when gRPC changes: re-check each member's
// meaning in the new version's client_context.h and channel_cc.cc, then
// extend the version gate. What the members do for a call end to end is in
// tests/e2e/caller_context_e2e_test.cc. Built without the fast paths
// (--config=no_grpc_fast_paths, as on another gRPC), the same tests check
// the fallback: only the public API, so nothing hidden is read or written.

#include <arpa/inet.h>
#include <fcntl.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/version_info.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/internal/grpc/parent_watch.h"
#include "rpcguard/internal/grpc_1_51/context.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/deadline_control.h"
#include "tests/testing/fault_server.h"

namespace rpcguard {
namespace internal {
namespace {

using ::rpcguard::testing::ControlCall;
using ::rpcguard::testing::ExpectWithinControl;
using ::rpcguard::testing::FaultServer;
using ::rpcguard::testing::StubKind;
using ::rpcguard::testing::Timing;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

// Whether this build reaches ClientContext's private members: the tests
// below expect what it reads, or the public API's fallback.
const bool kFastPaths = ContextAccessKnowsThisGrpc();

#ifdef RPCGUARD_NO_GRPC_1_51_FAST_PATHS
TEST(ContextAccessVersionTest, FastPathsCompiledOut) {
  EXPECT_FALSE(ContextAccessKnowsThisGrpc());
}
#else
TEST(ContextAccessVersionTest, WrittenForThisGrpc) {
  EXPECT_TRUE(ContextAccessKnowsThisGrpc())
      << "rpcguard reaches ClientContext's private members only on gRPC "
         "1.51; this build uses "
      << grpc::Version()
      << ". Hijacked attempts now lose the caller's authority, "
         "wait-for-ready and parent call, and auth_context() and "
         "debug_error_string() say nothing of them: re-check "
         "interceptors/rpcguard/internal/grpc_1_51/context.cc for this version "
         "and "
         "extend its version gate.";
}
#endif

// What gpr_log handed to Capture that rpcguard said; null when not
// capturing.
std::vector<std::string>* said = nullptr;

void Capture(gpr_log_func_args* args) {
  if (said != nullptr && absl::StartsWith(args->message, "rpcguard:")) {
    said->push_back(args->message);
  }
}

// What attempts lose without the fast paths is said once per process, at the
// first factory; with them nothing is lost, and nothing is said. The first
// rpcguard factory of this test binary: no other test here makes one.
TEST(ContextAccessTest, WhatAttemptsLoseIsSaidOnce) {
  std::vector<std::string> lines;
  said = &lines;
  // Whatever GRPC_VERBOSITY says.
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
  gpr_set_log_function(&Capture);
  MakeInterceptorFactory(Options());
  MakeInterceptorFactory(Options());
  gpr_set_log_function(nullptr);  // gRPC's own again
  said = nullptr;
  if (kFastPaths) {
    EXPECT_TRUE(lines.empty()) << lines[0];
    return;
  }
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(absl::StrContains(
      lines[0], "do not carry the caller's set_authority or parent call"))
      << lines[0];
}

TEST(ContextAccessTest, ReadsNothingFromAFreshContext) {
  grpc::ClientContext ctx;
  const CallerSettings s = ReadCallerSettings(ctx);
  EXPECT_EQ(s.authority, "");
  EXPECT_FALSE(s.wait_for_ready.has_value());
  EXPECT_EQ(s.parent, nullptr);
  EXPECT_EQ(s.census, nullptr);
}

TEST(ContextAccessTest, ReadsWhatThePublicSettersWrote) {
  for (bool wait : {false, true}) {
    grpc::ClientContext ctx;
    ctx.set_authority("svc.example.test");
    ctx.set_wait_for_ready(wait);
    const CallerSettings s = ReadCallerSettings(ctx);
    EXPECT_EQ(s.authority, kFastPaths ? "svc.example.test" : "");
    EXPECT_EQ(s.wait_for_ready,
              kFastPaths ? std::optional<bool>(wait) : std::nullopt);
  }
  grpc::ClientContext fail_fast;
  fail_fast.set_fail_fast(true);
  EXPECT_EQ(ReadCallerSettings(fail_fast).wait_for_ready,
            kFastPaths ? std::optional<bool>(false) : std::nullopt);
}

TEST(ContextAccessTest, MetadataToSendIsWhatAddMetadataWrote) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("k", "1");
  ctx.AddMetadata("k", "2");
  std::multimap<std::string, std::string>* md = MetadataToSend(&ctx);
  if (!kFastPaths) {
    EXPECT_EQ(md, nullptr);
    return;
  }
  ASSERT_NE(md, nullptr);
  EXPECT_EQ(md->count("k"), 2u);
  // Erased through it, gone from the context.
  md->erase("k");
  EXPECT_TRUE(MetadataToSend(&ctx)->empty());
}

TEST(ContextAccessTest, AppliedSettingsReadBack) {
  grpc::ClientContext from;
  from.set_authority("svc.example.test");
  from.set_wait_for_ready(true);
  CallerSettings s = ReadCallerSettings(from);
  // Any non-null pointer: only compared, never used.
  s.parent = reinterpret_cast<grpc_call*>(&from);
  s.propagation = grpc::PropagationOptions().disable_deadline_propagation();
  grpc::ClientContext to;
  ApplyCallerSettings(s, &to);
  const CallerSettings back = ReadCallerSettings(to);
  if (!kFastPaths) {
    // Nothing was read from `from`, and nothing can be read back.
    EXPECT_EQ(s.authority, "");
    EXPECT_EQ(back.authority, "");
    EXPECT_EQ(back.parent, nullptr);
    return;
  }
  EXPECT_EQ(back.authority, s.authority);
  EXPECT_EQ(back.wait_for_ready, s.wait_for_ready);
  EXPECT_EQ(back.parent, s.parent);
  EXPECT_EQ(back.propagation.c_bitmask(), s.propagation.c_bitmask());
}

TEST(ContextAccessTest, CoreChannelIsTheChannelsOwn) {
  auto channel =
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  grpc_channel* core = CoreChannel(channel.get());
  if (!kFastPaths) {
    EXPECT_EQ(core, nullptr);
    return;
  }
  ASSERT_NE(core, nullptr);
  char* target = grpc_channel_get_target(core);
  EXPECT_STREQ(target, "127.0.0.1:1");
  gpr_free(target);
}

// A FaultService server whose Get runs `handler` and finishes when told.
class ParentServer final : public FaultService::CallbackService {
 public:
  using Handler = std::function<void(grpc::CallbackServerContext*,
                                     grpc::ServerUnaryReactor*)>;

  explicit ParentServer(Handler handler) : handler_(std::move(handler)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_),
                                   grpc::InsecureChannelCredentials());
    stub_ = FaultService::NewStub(channel_);
  }
  ~ParentServer() override {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
    server_->Wait();
  }

  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx,
                                const FaultRequest*, FaultReply*) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    handler_(ctx, reactor);
    return reactor;
  }

  FaultService::Stub* stub() { return stub_.get(); }
  grpc::ChannelInterface* channel() { return channel_.get(); }
  int port() const { return port_; }
  grpc::Server* server() { return server_.get(); }

 private:
  Handler handler_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<FaultService::Stub> stub_;
};

TEST(ContextAccessTest, ReadsTheParentOfFromServerContext) {
  absl::Mutex mu;
  grpc_call* server_call = nullptr;
  CallerSettings seen;
  const grpc::PropagationOptions options =
      grpc::PropagationOptions().disable_deadline_propagation();
  ParentServer server([&](grpc::CallbackServerContext* ctx,
                          grpc::ServerUnaryReactor* reactor) {
    auto child = grpc::ClientContext::FromCallbackServerContext(*ctx, options);
    {
      absl::MutexLock lock(&mu);
      server_call = ctx->c_call();
      seen = ReadCallerSettings(*child);
    }
    reactor->Finish(grpc::Status::OK);
  });
  grpc::ClientContext ctx;
  FaultReply reply;
  ASSERT_TRUE(server.stub()->Get(&ctx, FaultRequest(), &reply).ok());
  absl::MutexLock lock(&mu);
  ASSERT_NE(server_call, nullptr);
  if (!kFastPaths) {
    EXPECT_EQ(seen.parent, nullptr);
    return;
  }
  EXPECT_EQ(seen.parent, server_call);
  EXPECT_EQ(seen.propagation.c_bitmask(), options.c_bitmask());
}

TEST(ContextAccessTest, DescribeFinalAttemptSetsWhatTheCallerReads) {
  ParentServer server(
      [](grpc::CallbackServerContext*, grpc::ServerUnaryReactor* reactor) {
        reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "no"));
      });
  grpc::ClientContext attempt;
  FaultReply reply;
  ASSERT_FALSE(server.stub()->Get(&attempt, FaultRequest(), &reply).ok());
  ASSERT_FALSE(attempt.debug_error_string().empty());
  grpc::ClientContext caller;  // never used for a call, as a hijacked one
  DescribeFinalAttempt(attempt, &caller);
  if (!kFastPaths) {
    EXPECT_EQ(caller.debug_error_string(), "");
    return;
  }
  EXPECT_EQ(caller.auth_context(), attempt.auth_context());
  EXPECT_EQ(caller.debug_error_string(), attempt.debug_error_string());
}

// The fact rpcguard reads before any message text: whether a transport
// ever took the call. gRPC 1.51 names the peer of a call no transport took
// by the channel's target.
TEST(ReachedTransportTest, ACallNoServerTookWasNotTaken) {
  auto channel =
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  auto stub = FaultService::NewStub(channel);
  grpc::ClientContext ctx;  // fail fast: no wait for a connection
  FaultReply reply;
  const grpc::Status status = stub->Get(&ctx, FaultRequest(), &reply);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  const std::optional<bool> reached = ReachedTransport(ctx, channel.get());
  if (!kFastPaths) {
    EXPECT_FALSE(reached.has_value());
    return;
  }
  ASSERT_TRUE(reached.has_value()) << "peer " << ctx.peer();
  EXPECT_FALSE(*reached) << "peer " << ctx.peer();
}

TEST(ReachedTransportTest, AServersAnswerInGrpcsOwnWordsWasTaken) {
  ParentServer server(
      [](grpc::CallbackServerContext*, grpc::ServerUnaryReactor* reactor) {
        reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                     "failed to connect to all addresses"));
      });
  grpc::ClientContext ctx;
  FaultReply reply;
  ASSERT_EQ(server.stub()->Get(&ctx, FaultRequest(), &reply).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  const std::optional<bool> reached = ReachedTransport(ctx, server.channel());
  if (!kFastPaths) {
    EXPECT_FALSE(reached.has_value());
    return;
  }
  ASSERT_TRUE(reached.has_value());
  EXPECT_TRUE(*reached) << "peer " << ctx.peer();
}

// Targets a transport's peer could equal: the fact is not known there, and
// rpcguard falls back to gRPC's words (docs/limits.md).
TEST(ReachedTransportTest, UnknownWhereTheTargetIsWrittenAsAnAddress) {
  ParentServer server(
      [](grpc::CallbackServerContext*, grpc::ServerUnaryReactor* reactor) {
        reactor->Finish(grpc::Status(grpc::StatusCode::ABORTED, "busy"));
      });
  auto channel =
      grpc::CreateChannel(absl::StrCat("ipv4:127.0.0.1:", server.port()),
                          grpc::InsecureChannelCredentials());
  grpc::ClientContext ctx;
  FaultReply reply;
  ASSERT_EQ(FaultService::NewStub(channel)
                ->Get(&ctx, FaultRequest(), &reply)
                .error_code(),
            grpc::StatusCode::ABORTED);
  if (kFastPaths) {
    // Why it cannot be known: the transport's peer is the target itself.
    EXPECT_EQ(ctx.peer(), absl::StrCat("ipv4:127.0.0.1:", server.port()));
  }
  EXPECT_FALSE(ReachedTransport(ctx, channel.get()).has_value());

  auto inproc = server.server()->InProcessChannel(grpc::ChannelArguments());
  grpc::ClientContext in_ctx;
  ASSERT_EQ(FaultService::NewStub(inproc)
                ->Get(&in_ctx, FaultRequest(), &reply)
                .error_code(),
            grpc::StatusCode::ABORTED);
  EXPECT_FALSE(ReachedTransport(in_ctx, inproc.get()).has_value())
      << "peer " << in_ctx.peer();
}

TEST(ReachedTransportTest, UnknownForAContextWithNoCall) {
  auto channel =
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  grpc::ClientContext never_used;
  EXPECT_FALSE(ReachedTransport(never_used, channel.get()).has_value());
  grpc::ClientContext ctx;
  FaultReply reply;
  ASSERT_FALSE(
      FaultService::NewStub(channel)->Get(&ctx, FaultRequest(), &reply).ok());
  EXPECT_FALSE(ReachedTransport(ctx, nullptr).has_value());
}

// A TCP port that accepts connections and counts them, to see a channel
// open none.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
    fcntl(fd_, F_SETFL, O_NONBLOCK);
  }
  ~Listener() { close(fd_); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  // Whether any connection is waiting to be accepted.
  bool Connected() {
    const int conn = accept(fd_, nullptr, nullptr);
    if (conn < 0) return false;
    close(conn);
    return true;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// How a watch ended.
struct Ended {
  absl::Notification done;
  grpc::StatusCode code = grpc::StatusCode::OK;
  absl::Time at;
};

// A parent call and the watch on it: a call made with `deadline`
// (absl::InfiniteFuture(): none) to a server of its own, whose handler
// starts a ParentWatch on `channel` and finishes the parent once the watch
// has ended. With `control`, the handler also makes the parent's child that
// gRPC itself ends: a plain call of `control_request`
// (FromCallbackServerContext, the same options) that `control`'s server
// holds, the control of the watch's timing
// (tests/testing/deadline_control.h).
class WatchedParent {
 public:
  WatchedParent(grpc::Channel* channel, grpc::PropagationOptions options,
                absl::Time deadline, FaultService::Stub* control = nullptr,
                FaultRequest control_request = FaultRequest()) {
    server_ =
        std::make_unique<ParentServer>([=](grpc::CallbackServerContext* ctx,
                                           grpc::ServerUnaryReactor* reactor) {
          auto child =
              grpc::ClientContext::FromCallbackServerContext(*ctx, options);
          const CallerSettings s = ReadCallerSettings(*child);
          watch_ = ParentWatch::Start(CoreChannel(channel), s.parent,
                                      s.propagation.c_bitmask(),
                                      [this, reactor](grpc::StatusCode code) {
                                        ended_.code = code;
                                        ended_.at = absl::Now();
                                        ended_.done.Notify();
                                        reactor->Finish(grpc::Status::OK);
                                      });
          if (watch_ == nullptr) {
            // No watch (the fallback: the parent is not known): nothing to
            // wait for.
            reactor->Finish(grpc::Status::OK);
          } else if (control != nullptr) {
            control_ = std::make_unique<ControlCall>(
                StubKind::kCallback, control, control_request,
                grpc::ClientContext::FromCallbackServerContext(*ctx, options),
                deadline);
          }
          started_.Notify();
        });
    if (deadline != absl::InfiniteFuture()) {
      upstream_.set_deadline(absl::ToChronoTime(deadline));
    }
    server_->stub()->async()->Get(
        &upstream_, &request_, &reply_,
        [this](grpc::Status) { upstream_done_.Notify(); });
    started_.WaitForNotification();
  }
  ~WatchedParent() {
    upstream_done_.WaitForNotification();
    control_.reset();
  }

  std::shared_ptr<ParentWatch>& watch() { return watch_; }
  Ended& ended() { return ended_; }
  // Null without a watch or a control server.
  ControlCall* control() { return control_.get(); }
  void CancelParent() { upstream_.TryCancel(); }

 private:
  std::unique_ptr<ParentServer> server_;
  grpc::ClientContext upstream_;  // outlives the call: the destructor waits
  FaultRequest request_;
  FaultReply reply_;
  absl::Notification started_;
  absl::Notification upstream_done_;
  // Written by the handler before started_ is notified.
  std::shared_ptr<ParentWatch> watch_;
  std::unique_ptr<ControlCall> control_;
  Ended ended_;
};

class WatchTest : public ::testing::Test {
 protected:
  // Holds the control's calls (a child of the parent, a plain channel).
  FaultServer control_server_;
  std::unique_ptr<FaultService::Stub> control_ =
      testing::PlainStub(control_server_.address());
};

TEST_F(WatchTest, EndsWhenTheParentIsCancelledAndSendsNothing) {
  // The watch ends within 200 ms of the parent's cancel on a quiet machine,
  // or as soon as the parent's plain child call that gRPC cancels.
  ExpectWithinControl(
      "time to end after the cancel", absl::Milliseconds(200), [&] {
        Listener listener;
        auto channel = grpc::CreateChannel(listener.address(),
                                           grpc::InsecureChannelCredentials());
        WatchedParent parent(channel.get(), grpc::PropagationOptions(),
                             absl::Now() + absl::Seconds(10), control_.get(),
                             ControlCall::Held(absl::Seconds(2)));
        if (!kFastPaths) {
          // The fallback watches nothing: the parent call is not known.
          EXPECT_EQ(parent.watch(), nullptr);
          return Timing{};
        }
        EXPECT_NE(parent.watch(), nullptr);
        if (parent.watch() == nullptr) return Timing{};
        const std::string control_op = parent.control()->op_id();
        const absl::Time limit = absl::Now() + absl::Seconds(5);
        while (control_server_.Op(control_op).attempts < 1 &&
               absl::Now() < limit) {
          absl::SleepFor(absl::Milliseconds(1));
        }
        absl::SleepFor(absl::Milliseconds(100));
        Ended& ended = parent.ended();
        EXPECT_FALSE(ended.done.HasBeenNotified());
        const absl::Time cancelled = absl::Now();
        parent.CancelParent();
        if (!ended.done.WaitForNotificationWithTimeout(absl::Seconds(5))) {
          ADD_FAILURE() << "the watch did not end 5 s after the cancel";
          ended.done.WaitForNotification();
        }
        EXPECT_EQ(ended.code, grpc::StatusCode::CANCELLED);
        EXPECT_EQ(parent.control()->Wait().error_code(),
                  grpc::StatusCode::CANCELLED);
        // Not a byte, not even a connection: the channel never left IDLE.
        EXPECT_FALSE(listener.Connected());
        EXPECT_EQ(channel->GetState(false), GRPC_CHANNEL_IDLE);
        return Timing{ended.at - cancelled,
                      parent.control()->end() - cancelled};
      });
}

TEST_F(WatchTest, EndsAtTheParentsDeadline) {
  // Within 200 ms after the deadline on a quiet machine, or as late as the
  // parent's plain child call that gRPC ends at the same deadline.
  ExpectWithinControl("lateness at the deadline", absl::Milliseconds(200), [&] {
    Listener listener;
    auto channel = grpc::CreateChannel(listener.address(),
                                       grpc::InsecureChannelCredentials());
    const absl::Time deadline = absl::Now() + absl::Milliseconds(300);
    WatchedParent parent(channel.get(), grpc::PropagationOptions(), deadline,
                         control_.get(), ControlCall::HeldPast(deadline));
    if (!kFastPaths) {
      // The fallback watches nothing: the parent call is not known.
      EXPECT_EQ(parent.watch(), nullptr);
      return Timing{};
    }
    EXPECT_NE(parent.watch(), nullptr);
    if (parent.watch() == nullptr) return Timing{};
    Ended& ended = parent.ended();
    if (!ended.done.WaitForNotificationWithTimeout(absl::Seconds(5))) {
      ADD_FAILURE() << "the watch did not end 5 s after the deadline";
      ended.done.WaitForNotification();
    }
    // Its own deadline timer, or the parent's cancel at the same deadline.
    EXPECT_TRUE(ended.code == grpc::StatusCode::DEADLINE_EXCEEDED ||
                ended.code == grpc::StatusCode::CANCELLED)
        << ended.code;
    EXPECT_GE(ended.at, deadline - absl::Milliseconds(5));
    const grpc::StatusCode control_code = parent.control()->Wait().error_code();
    EXPECT_TRUE(control_code == grpc::StatusCode::DEADLINE_EXCEEDED ||
                control_code == grpc::StatusCode::CANCELLED)
        << control_code;
    EXPECT_FALSE(listener.Connected());
    return Timing{ended.at - deadline, parent.control()->LateBy()};
  });
}

TEST_F(WatchTest, StopEndsIt) {
  Listener listener;
  auto channel = grpc::CreateChannel(listener.address(),
                                     grpc::InsecureChannelCredentials());
  WatchedParent parent(channel.get(), grpc::PropagationOptions(),
                       absl::Now() + absl::Seconds(10));
  if (!kFastPaths) {
    // The fallback watches nothing: the parent call is not known.
    EXPECT_EQ(parent.watch(), nullptr);
    return;
  }
  ASSERT_NE(parent.watch(), nullptr);
  parent.watch()->Stop();
  ASSERT_TRUE(
      parent.ended().done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(parent.ended().code, grpc::StatusCode::CANCELLED);
  parent.watch().reset();
  EXPECT_FALSE(listener.Connected());
}

TEST(ParentWatchTest, NothingToWatchWithoutDeadlineOrCancelPropagation) {
  auto channel =
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  grpc::ClientContext any;  // its address stands for a call: never used
  EXPECT_EQ(ParentWatch::Start(
                CoreChannel(channel.get()), reinterpret_cast<grpc_call*>(&any),
                GRPC_PROPAGATE_CENSUS_STATS_CONTEXT, [](grpc::StatusCode) {}),
            nullptr);
  EXPECT_EQ(
      ParentWatch::Start(CoreChannel(channel.get()), nullptr,
                         GRPC_PROPAGATE_DEFAULTS, [](grpc::StatusCode) {}),
      nullptr);
}

}  // namespace
}  // namespace internal
}  // namespace rpcguard
