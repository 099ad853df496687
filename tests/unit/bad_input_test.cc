// Copyright rpcguard authors.
//
// Bad input from the application: wrong-typed response objects, ByteBuffer
// generic calls, expired deadlines, cancelled contexts, metadata that clashes
// with rpcguard's own keys, huge idempotency keys, and interceptor factories
// shared by many channels and destroyed while calls are in flight. Each case
// must either work or fail with a clear status; none may crash. The suite also
// runs under --config=asan (ASan + UBSan).
//
// Every test talks to a real FaultServer on 127.0.0.1 and asserts on what
// the server saw, so "nothing was sent" is checked, not assumed.

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "proto/rpcguard/internal/v1/rpc_status.pb.h"
#include "proto/rpcguard/testing/v1/fault.grpc.pb.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/deadline_control.h"
#include "tests/testing/fault_server.h"

namespace rpcguard {
namespace {

using ::rpcguard::testing::ControlCall;
using ::rpcguard::testing::ExpectWithinControl;
using ::rpcguard::testing::FaultServer;
using ::rpcguard::testing::StubKind;
using ::rpcguard::testing::Timing;
using ::rpcguard::testing::v1::FaultReply;
using ::rpcguard::testing::v1::FaultRequest;
using ::rpcguard::testing::v1::FaultService;

constexpr char kGet[] = "/rpcguard.testing.v1.FaultService/Get";
constexpr char kCreate[] = "/rpcguard.testing.v1.FaultService/Create";

// Get, Put and Charge retried with short backoffs; Create left undeclared
// (tried once, not hijacked: rpcguard's fast path).
constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"},
            {"service": "rpcguard.testing.v1.FaultService", "method": "Put"},
            {"service": "rpcguard.testing.v1.FaultService", "method": "Charge"}],
   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.005s",
                   "maxBackoff": "0.02s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]}}
]})json";

Options MakeOptions(const std::string& json = kConfig) {
  absl::StatusOr<Config> config = Config::FromJson(json);
  EXPECT_TRUE(config.ok()) << config.status();
  Options options;
  options.config = config.ok() ? *config : Config();
  // These tests fail many calls on purpose to exercise lifetimes and bad
  // input; the breaker and budget (tested on their own) would cut that short.
  DestinationConfig destination = options.config.destination();
  destination.breaker_enabled = false;
  destination.budget_enabled = false;
  options.config.set_destination(destination);
  options.breaker_registry = *BreakerRegistry::Create({});
  // Quiet: these tests make many failing calls on purpose.
  options.trace_verbosity = TraceVerbosity::kOff;
  options.stats = std::make_shared<Stats>();
  return options;
}

enum class Api { kSync, kCallback };

// The stub API of a control call made like one of `api`'s
// (tests/testing/deadline_control.h).
StubKind KindOf(Api api) {
  return api == Api::kSync ? StubKind::kSync : StubKind::kCallback;
}

// Calls `method` (Get or Create) of `stub` through the chosen API and waits.
grpc::Status CallFault(FaultService::Stub* stub, Api api, bool create,
                       grpc::ClientContext* ctx, const FaultRequest& req,
                       FaultReply* reply) {
  if (api == Api::kSync) {
    return create ? stub->Create(ctx, req, reply) : stub->Get(ctx, req, reply);
  }
  absl::Notification done;
  grpc::Status status;
  auto on_done = [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  };
  if (create) {
    stub->async()->Create(ctx, &req, reply, on_done);
  } else {
    stub->async()->Get(ctx, &req, reply, on_done);
  }
  done.WaitForNotification();
  return status;
}

// A unary call through grpc::TemplatedGenericStub<Req, Resp> (the callback
// API), as an application using generic calls makes it.
template <typename Req, typename Resp>
grpc::Status GenericCall(const std::shared_ptr<grpc::Channel>& channel,
                         const std::string& method, grpc::ClientContext* ctx,
                         const Req& req, Resp* resp) {
  grpc::TemplatedGenericStub<Req, Resp> stub(channel);
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(ctx, method, grpc::StubOptions(), &req, resp,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  return status;
}

// The same through the CQ-async generic API (PrepareUnaryCall).
grpc::Status GenericCqCall(const std::shared_ptr<grpc::Channel>& channel,
                           const std::string& method, grpc::ClientContext* ctx,
                           const grpc::ByteBuffer& req,
                           grpc::ByteBuffer* resp) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  auto rpc = stub.PrepareUnaryCall(ctx, method, req, &cq);
  rpc->StartCall();
  grpc::Status status;
  int tag = 1;
  rpc->Finish(resp, &status, &tag);
  void* got;
  bool ok;
  EXPECT_TRUE(cq.Next(&got, &ok));
  EXPECT_EQ(got, &tag);
  cq.Shutdown();
  while (cq.Next(&got, &ok)) {
  }
  return status;
}

grpc::ByteBuffer ToByteBuffer(const google::protobuf::MessageLite& message) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

bool FromByteBuffer(const grpc::ByteBuffer& buffer,
                    google::protobuf::MessageLite* message) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return message->ParseFromString(bytes);
}

std::vector<std::string> TrailerValues(const grpc::ClientContext& ctx,
                                       const std::string& key) {
  std::vector<std::string> values;
  auto range = ctx.GetServerTrailingMetadata().equal_range(key);
  for (auto it = range.first; it != range.second; ++it) {
    values.emplace_back(it->second.data(), it->second.size());
  }
  return values;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Counts the attempts that really start, per operation (the `test-op`
// metadata, which rpcguard copies onto every attempt). Registered after
// rpcguard, so it runs once per attempt, on the client, before anything is
// sent: a server's count can trail the client's (a cancelled request may
// still be delivered), this one cannot.
class AttemptCounter {
 public:
  class Factory final
      : public grpc::experimental::ClientInterceptorFactoryInterface {
   public:
    explicit Factory(AttemptCounter* counter) : counter_(counter) {}
    grpc::experimental::Interceptor* CreateClientInterceptor(
        grpc::experimental::ClientRpcInfo*) override {
      return new Interceptor(counter_);
    }

   private:
    AttemptCounter* const counter_;
  };

  int Started(const std::string& op) const {
    absl::MutexLock lock(&mu_);
    auto it = started_.find(op);
    return it == started_.end() ? 0 : it->second;
  }

 private:
  class Interceptor final : public grpc::experimental::Interceptor {
   public:
    explicit Interceptor(AttemptCounter* counter) : counter_(counter) {}
    void Intercept(
        grpc::experimental::InterceptorBatchMethods* batch) override {
      if (batch->QueryInterceptionHookPoint(
              grpc::experimental::InterceptionHookPoints::
                  PRE_SEND_INITIAL_METADATA)) {
        const auto* md = batch->GetSendInitialMetadata();
        auto it = md->find("test-op");
        if (it != md->end()) {
          absl::MutexLock lock(&counter_->mu_);
          ++counter_->started_[it->second];
        }
      }
      batch->Proceed();
    }

   private:
    AttemptCounter* const counter_;
  };

  mutable absl::Mutex mu_;
  std::map<std::string, int> started_ ABSL_GUARDED_BY(mu_);
};

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok());
    // [rpcguard, counter]: the counter sees every attempt.
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        factories;
    factories.push_back(MakeInterceptorFactory(MakeOptions()));
    factories.push_back(std::make_unique<AttemptCounter::Factory>(&counter_));
    channel_ = grpc::experimental::CreateCustomChannelWithInterceptors(
        server_.address(), grpc::InsecureChannelCredentials(),
        grpc::ChannelArguments(), std::move(factories));
    stub_ = FaultService::NewStub(channel_);
  }

  std::string Op(const std::string& name) {
    return absl::StrCat(name, "-", ++ops_);
  }

  AttemptCounter counter_;  // outlives the channel
  FaultServer server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<FaultService::Stub> stub_;
  // A plain channel's (no rpcguard) to the same server: the controls'.
  std::unique_ptr<FaultService::Stub> plain_ =
      testing::PlainStub(server_.address());
  int ops_ = 0;
};

// ---------------------------------------------------------------------------
// Wrong-typed response messages and ByteBuffer generic calls.

TEST_F(BadInputTest, ByteBufferCallWithPassThroughWorks) {
  for (bool fail : {false, true}) {
    FaultRequest req;
    req.set_op_id(Op("bb-marked"));
    req.set_payload("hello");
    if (fail) req.set_fail_first(1);
    const grpc::ByteBuffer request = ToByteBuffer(req);
    grpc::ByteBuffer response;
    grpc::ClientContext ctx;
    MarkPassThrough(&ctx);
    grpc::Status s = GenericCall(channel_, kGet, &ctx, request, &response);
    // Passed through untouched: tried once, whatever the method's policy.
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
    if (fail) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
      continue;
    }
    ASSERT_TRUE(s.ok()) << s.error_message();
    FaultReply reply;
    ASSERT_TRUE(FromByteBuffer(response, &reply));
    EXPECT_EQ(reply.op_id(), req.op_id());
    EXPECT_EQ(reply.payload(), "hello");
    // A marked call is left entirely alone: not even rpcguard's metadata.
    EXPECT_EQ(server_.Op(req.op_id()).attempt_headers,
              std::vector<std::string>{""});
  }
}

TEST_F(BadInputTest, ByteBufferCallToUndeclaredMethodWorksUnmarked) {
  // Create is not declared retriable: rpcguard never hijacks it, so it never
  // touches the response object and a ByteBuffer is fine without the mark.
  FaultRequest req;
  req.set_op_id(Op("bb-create"));
  const grpc::ByteBuffer request = ToByteBuffer(req);
  grpc::ByteBuffer response;
  grpc::ClientContext ctx;
  grpc::Status s = GenericCall(channel_, kCreate, &ctx, request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  FaultReply reply;
  ASSERT_TRUE(FromByteBuffer(response, &reply));
  EXPECT_EQ(reply.op_id(), req.op_id());
  EXPECT_EQ(reply.attempt_header(), "1");
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
}

// A grpc::GenericStub call with ByteBuffer messages to a method rpcguard
// would retry, made without MarkPassThrough: no attempt's response could be
// put into a ByteBuffer response object, so rpcguard sends the call once, as
// the application's own call, and says so when it fails. Empty or reused
// (non-empty) response buffers alike (a reused one crashed the process once:
// it was taken for a protobuf message).
TEST_F(BadInputTest, ByteBufferCallToRetriedMethodFailingIsSentOnceAndSaysSo) {
  FaultRequest req;
  req.set_op_id(Op("bb-get-fails"));
  req.set_fail_first(100);
  const grpc::ByteBuffer request = ToByteBuffer(req);
  grpc::ByteBuffer response;
  grpc::ClientContext ctx;
  grpc::Status s = GenericCall(channel_, kGet, &ctx, request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(Contains(s.error_message(),
                       "[rpcguard: 1 attempt, gave up: unsupported_call]"))
      << s.error_message();
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
}

TEST_F(BadInputTest, ByteBufferCallToRetriedMethodUnmarkedIsSentOnce) {
  for (bool cq : {false, true}) {
    for (bool reused : {false, true}) {
      FaultRequest req;
      req.set_op_id(Op(absl::StrCat(cq ? "bb-unmarked-cq" : "bb-unmarked-cb",
                                    reused ? "-reused" : "")));
      const grpc::ByteBuffer request = ToByteBuffer(req);
      // A buffer reused from an earlier call is not empty.
      grpc::ByteBuffer response =
          reused ? ToByteBuffer(req) : grpc::ByteBuffer();
      grpc::ClientContext ctx;
      grpc::Status s =
          cq ? GenericCqCall(channel_, kGet, &ctx, request, &response)
             : GenericCall(channel_, kGet, &ctx, request, &response);
      ASSERT_TRUE(s.ok()) << s.error_message();
      FaultReply reply;
      ASSERT_TRUE(FromByteBuffer(response, &reply));
      EXPECT_EQ(reply.op_id(), req.op_id());
      EXPECT_EQ(reply.attempt_header(), "1");
      EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
    }
  }
}

// A grpc::GenericStub caller may pass the method name as a temporary: gRPC
// copies it when the call is created, and the CQ API starts the call (and
// runs interceptors' first batch) later. rpcguard must not read the name
// after the call's creation (ASan reports a read of freed memory if it does).
TEST_F(BadInputTest, GenericCallWithATemporaryMethodNameReadsNoFreedMemory) {
  struct Case {
    const char* method;
    bool marked;
    int fail_first;
    grpc::StatusCode code;
  };
  // Marked calls are left alone; an unmarked call to a retriable method is
  // sent once (unsupported_call).
  for (const Case& c : {Case{kGet, true, 1, grpc::StatusCode::UNAVAILABLE},
                        Case{kCreate, true, 1, grpc::StatusCode::UNAVAILABLE},
                        Case{kGet, false, 0, grpc::StatusCode::OK}}) {
    FaultRequest req;
    req.set_op_id(Op(absl::StrCat("temporary-name-", c.method, c.marked)));
    req.set_fail_first(c.fail_first);
    const grpc::ByteBuffer request = ToByteBuffer(req);
    grpc::ByteBuffer response;
    grpc::ClientContext ctx;
    if (c.marked) MarkPassThrough(&ctx);
    grpc::GenericStub stub(channel_);
    grpc::CompletionQueue cq;
    // The name's storage is freed at the end of this statement.
    auto rpc = stub.PrepareUnaryCall(&ctx, std::string(c.method), request, &cq);
    rpc->StartCall();
    grpc::Status status;
    int tag = 1;
    rpc->Finish(&response, &status, &tag);
    void* got;
    bool ok;
    ASSERT_TRUE(cq.Next(&got, &ok));
    cq.Shutdown();
    while (cq.Next(&got, &ok)) {
    }
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
  }
}

TEST_F(BadInputTest, ProtoResponseOfTheWrongTypeFailsClearly) {
  // The application asks for /FaultService/Get but receives into a message
  // of another type (RetryInfo: field 1 is a Duration, where FaultReply has
  // the op_id string). "$" is field 4 with wire type END_GROUP: not a valid
  // Duration, so the reply cannot be parsed.
  FaultRequest req;
  req.set_op_id("$");
  rpcguard::internal::v1::RetryInfo wrong;
  grpc::ClientContext ctx;
  grpc::Status s = GenericCall(channel_, kGet, &ctx, req, &wrong);
  // Plain gRPC 1.51's callback API returns OK with a half-parsed message here
  // (it allows a unary call without a message); rpcguard says what happened.
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_TRUE(Contains(s.error_message(),
                       "rpcguard: cannot parse the "
                       "response of " +
                           std::string(kGet)))
      << s.error_message();
  EXPECT_EQ(server_.Op("$").attempts, 1);
}

TEST_F(BadInputTest, ProtoResponseOfAnotherButCompatibleTypeWorks) {
  // Wire-compatible bytes parse into the other type, as they would without
  // rpcguard: OpStats shares FaultReply's field numbers and types where it
  // matters (op_id, attempts; attempt_header lands in `keys`), and the rest
  // are kept as unknown fields. The application asked for it.
  FaultRequest req;
  req.set_op_id(Op("compatible"));
  rpcguard::testing::v1::OpStats other;
  grpc::ClientContext ctx;
  grpc::Status s = GenericCall(channel_, kGet, &ctx, req, &other);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(other.op_id(), req.op_id());
  EXPECT_EQ(other.attempts(), 1);
  EXPECT_EQ(std::vector<std::string>(other.keys().begin(), other.keys().end()),
            std::vector<std::string>{"1"});
}

// ---------------------------------------------------------------------------
// Deadlines.

TEST_F(BadInputTest, ExpiredDeadlinesSendNothing) {
  const std::chrono::system_clock::time_point deadlines[] = {
      std::chrono::system_clock::now() - std::chrono::milliseconds(1),
      std::chrono::system_clock::now() - std::chrono::hours(24 * 365),
      // One second after the epoch (before it, gRPC reads as "no deadline").
      std::chrono::system_clock::time_point(std::chrono::seconds(1)),
      std::chrono::system_clock::now(),
  };
  for (const auto& deadline : deadlines) {
    for (Api api : {Api::kSync, Api::kCallback}) {
      for (bool create : {false, true}) {
        SCOPED_TRACE(absl::StrCat(
            "deadline ",
            std::chrono::duration_cast<std::chrono::microseconds>(
                deadline - std::chrono::system_clock::now())
                .count(),
            " us from now, ", api == Api::kSync ? "sync" : "callback",
            create ? " Create" : " Get"));
        // At once: within 100 ms on a quiet machine, or as soon as a plain
        // channel's call with the same deadline made in the same moment.
        ExpectWithinControl("time to end", absl::Milliseconds(100), [&] {
          FaultRequest req;
          req.set_op_id(Op("expired"));
          FaultReply reply;
          grpc::ClientContext ctx;
          ctx.set_deadline(deadline);
          ControlCall control(KindOf(api), plain_.get(), FaultRequest(),
                              absl::FromChrono(deadline));
          const absl::Time start = absl::Now();
          grpc::Status s =
              CallFault(stub_.get(), api, create, &ctx, req, &reply);
          const absl::Duration took = absl::Now() - start;
          control.Wait();
          if (!create) {
            // rpcguard's own check: nothing is sent.
            EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
                << s.error_message();
            EXPECT_EQ(server_.Op(req.op_id()).attempts, 0);
          } else {
            // Create is not hijacked: gRPC core's own handling, which may
            // send a call whose deadline passed microseconds ago and, on
            // loopback, even get its answer before its deadline timer fires.
            EXPECT_TRUE(s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                        s.ok())
                << s.error_message();
            EXPECT_LE(server_.Op(req.op_id()).attempts, 1);
          }
          return Timing{took, control.Took()};
        });
      }
    }
  }
}

TEST_F(BadInputTest, NoDeadlineWorks) {
  for (Api api : {Api::kSync, Api::kCallback}) {
    FaultRequest req;
    req.set_op_id(Op("no-deadline"));
    req.set_fail_first(1);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::time_point::max());
    grpc::Status s = CallFault(stub_.get(), api, false, &ctx, req, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(reply.attempts_seen(), 2);
  }
}

// Regression: a deadline beyond what std::chrono::system_clock can hold
// (gRPC takes any gpr_timespec) overflowed a signed addition when rpcguard
// converted an attempt's deadline back to a system_clock time point (UBSan:
// "signed integer overflow" in chrono.h, reached from ToSystemTime). It then
// only worked by accident: the wrapped, negative time meant "no deadline" to
// gRPC. It must work as a very far deadline.
TEST_F(BadInputTest, DeadlineBeyondSystemClockRangeWorks) {
  for (Api api : {Api::kSync, Api::kCallback}) {
    FaultRequest req;
    req.set_op_id(Op("far-deadline"));
    req.set_fail_first(1);
    FaultReply reply;
    grpc::ClientContext ctx;
    gpr_timespec far = gpr_now(GPR_CLOCK_REALTIME);
    far.tv_sec = int64_t{1} << 40;  // some 35,000 years from now
    ctx.set_deadline(far);
    grpc::Status s = CallFault(stub_.get(), api, false, &ctx, req, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(reply.attempts_seen(), 2);
  }
}

// A Clock whose first monotonic reading comes `late` after the real time,
// as when the thread reading it was preempted between two clock reads; real
// afterwards.
class OnceLateClock final : public Clock {
 public:
  explicit OnceLateClock(absl::Duration late) : late_(late) {}
  absl::Time MonotonicNow() override {
    return Clock::Real()->MonotonicNow() +
           (first_.exchange(false) ? late_ : absl::ZeroDuration());
  }
  absl::Time WallNow() override { return absl::Now(); }

 private:
  const absl::Duration late_;
  std::atomic<bool> first_{true};
};

// Regression: rpcguard converted the caller's deadline to its own clock and
// back (CallerDeadline, GrpcDeadline) by reading two clocks one after the
// other; a thread preempted between the two reads moved the attempt's
// deadline later by as long as it was preempted (seen by the chaos test:
// attempts 1-2 ms past their call's deadline under load, and stalls of 60 ms
// happen on a busy machine). An attempt must never outlive the caller's own
// deadline, whatever the clocks do.
TEST_F(BadInputTest, AttemptNeverOutlivesTheCallersDeadline) {
  for (Api api : {Api::kSync, Api::kCallback}) {
    // Late by 20 ms at most on a quiet machine, or as late as a plain
    // channel's call with the same deadline that the server holds past it.
    // Each measurement with a clock and a channel of its own: the clock is
    // late once.
    ExpectWithinControl(
        "lateness at the deadline", absl::Milliseconds(20), [&] {
          OnceLateClock clock(absl::Milliseconds(60));
          Options options = MakeOptions();
          options.clock = &clock;
          auto channel = CreateChannel(
              server_.address(), grpc::InsecureChannelCredentials(), options);
          EXPECT_TRUE(channel.ok());
          if (!channel.ok()) return Timing{};
          auto stub = FaultService::NewStub(*channel);
          FaultRequest req;
          req.set_op_id(Op("late-clock"));
          req.set_delay_ms(1000);
          FaultReply reply;
          grpc::ClientContext ctx;
          const absl::Time deadline = absl::Now() + absl::Milliseconds(150);
          ctx.set_deadline(absl::ToChronoTime(deadline));
          ControlCall control(KindOf(api), plain_.get(),
                              ControlCall::HeldPast(deadline), deadline);
          grpc::Status s = CallFault(stub.get(), api, false, &ctx, req, &reply);
          const absl::Duration late = absl::Now() - deadline;
          EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
          EXPECT_EQ(control.Wait().error_code(),
                    grpc::StatusCode::DEADLINE_EXCEEDED);
          return Timing{late, control.LateBy()};
        });
  }
}

// ---------------------------------------------------------------------------
// Cancelled contexts.

// A context cancelled before its stub call sends nothing, and the call's
// trailer counts the attempts seen below rpcguard. This is also where issue
// 30's two chaos violations (the chaos caller cancelled early like this)
// were checked. The first ("an attempt 57 ms after a cancel") reproduced:
// gRPC still runs the hooks of such a call, so the counter below rpcguard
// sees an attempt start after the cancel (Create, sent once, on both stubs;
// Get too where it rides the application's call) though the server sees
// none; the chaos check now counts from when the call was issued. The second
// ("a call whose trailer said 0 attempts while one was seen") did not:
// rpcguard's trailer is what the counter saw, on both stubs, sent once or
// retriable.
TEST_F(BadInputTest, CancelledBeforeTheCallSendsNothing) {
  for (Api api : {Api::kSync, Api::kCallback}) {
    for (bool create : {false, true}) {
      FaultRequest req;
      req.set_op_id(Op("pre-cancelled"));
      FaultReply reply;
      grpc::ClientContext ctx;
      ctx.AddMetadata("test-op", req.op_id());
      ctx.TryCancel();
      ctx.TryCancel();  // twice: still one cancel
      grpc::Status s = CallFault(stub_.get(), api, create, &ctx, req, &reply);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
      const std::vector<std::string> trailer =
          TrailerValues(ctx, kAttemptsTrailer);
      const int seen = counter_.Started(req.op_id());
      SCOPED_TRACE(absl::StrCat(api == Api::kSync ? "sync" : "callback",
                                create ? " Create" : " Get", ", seen ", seen));
      // Create is sent once, passing through: the counter sees its attempt
      // start after the cancel. Get is refused before its first attempt (0
      // seen) unless it rides (callback, with gRPC 1.51's fast paths: 1).
      if (create) {
        EXPECT_EQ(seen, 1);
      }
      EXPECT_EQ(trailer, std::vector<std::string>{absl::StrCat(seen)});
      absl::SleepFor(absl::Milliseconds(20));
      EXPECT_EQ(server_.Op(req.op_id()).attempts, 0);
    }
  }
}

TEST_F(BadInputTest, CancelAfterCompletionIsHarmless) {
  for (Api api : {Api::kSync, Api::kCallback}) {
    FaultRequest req;
    req.set_op_id(Op("cancel-after"));
    req.set_fail_first(1);
    FaultReply reply;
    grpc::ClientContext ctx;
    grpc::Status s = CallFault(stub_.get(), api, false, &ctx, req, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ctx.TryCancel();
    ctx.TryCancel();
    EXPECT_EQ(reply.attempts_seen(), 2);
    absl::SleepFor(absl::Milliseconds(30));
    EXPECT_EQ(server_.Op(req.op_id()).attempts, 2);
  }
}

TEST_F(BadInputTest, CancelRacingTheCallEndsItCleanly) {
  // A cancel from another thread at a random moment around the start of the
  // call: before it, during the hijack, during an attempt or a backoff. The
  // call always completes, with OK or CANCELLED (or the failure it had
  // already met), and nothing is attempted once CANCELLED was returned.
  absl::BitGen gen;
  int cancelled = 0;
  for (int i = 0; i < 120; ++i) {
    const Api api = i % 2 == 0 ? Api::kSync : Api::kCallback;
    const bool create = i % 5 == 0;
    FaultRequest req;
    req.set_op_id(Op("race"));
    req.set_fail_first(absl::Uniform(gen, 0, 3));
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.AddMetadata("test-op", req.op_id());
    const auto wait = std::chrono::microseconds(absl::Uniform(gen, 0, 3000));
    std::thread canceller([&ctx, wait] {
      std::this_thread::sleep_for(wait);
      ctx.TryCancel();
    });
    grpc::Status s = CallFault(stub_.get(), api, create, &ctx, req, &reply);
    const int started = counter_.Started(req.op_id());
    canceller.join();
    EXPECT_TRUE(s.ok() || s.error_code() == grpc::StatusCode::CANCELLED ||
                s.error_code() == grpc::StatusCode::UNAVAILABLE)
        << s.error_code() << " " << s.error_message();
    if (s.error_code() == grpc::StatusCode::CANCELLED) ++cancelled;
    EXPECT_LE(started, create ? 1 : 4) << req.op_id();
    // rpcguard's count of its attempts is the counter's, whenever the
    // cancel came (the chaos test's "attempts trailer = attempts seen").
    for (const std::string& value : TrailerValues(ctx, kAttemptsTrailer)) {
      EXPECT_EQ(value, absl::StrCat(started)) << req.op_id();
    }
    // No attempt starts once the call has returned, and the server never
    // sees more than started (a cancelled request may still arrive).
    absl::SleepFor(absl::Milliseconds(5));
    EXPECT_EQ(counter_.Started(req.op_id()), started) << req.op_id();
    EXPECT_LE(server_.Op(req.op_id()).attempts, started) << req.op_id();
  }
  EXPECT_GT(cancelled, 0);
}

// ---------------------------------------------------------------------------
// Metadata that clashes with rpcguard's own.

TEST_F(BadInputTest, CallersAttemptHeaderIsReplaced) {
  for (bool create : {false, true}) {
    FaultRequest req;
    req.set_op_id(Op("attempt-header"));
    req.set_fail_first(create ? 0 : 1);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.AddMetadata("rpcguard-attempt", "7");
    ctx.AddMetadata("rpcguard-attempt", "8");
    grpc::Status s =
        CallFault(stub_.get(), Api::kSync, create, &ctx, req, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
    // rpcguard owns the header: the server sees its numbering only.
    EXPECT_EQ(server_.Op(req.op_id()).attempt_headers,
              create ? std::vector<std::string>{"1"}
                     : (std::vector<std::string>{"1", "2"}));
  }
}

TEST_F(BadInputTest, CallersAttemptsTrailerKeyDoesNotConfuseTheCount) {
  // `rpcguard-attempts` is a trailer name; a caller that sends it as request
  // metadata only passes it to the server, and the trailer it gets back
  // holds exactly one value: rpcguard's count.
  for (bool create : {false, true}) {
    FaultRequest req;
    req.set_op_id(Op("attempts-trailer"));
    req.set_fail_first(create ? 0 : 2);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.AddMetadata("rpcguard-attempts", "99");
    grpc::Status s =
        CallFault(stub_.get(), Api::kCallback, create, &ctx, req, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(TrailerValues(ctx, "rpcguard-attempts"),
              std::vector<std::string>{create ? "1" : "3"});
  }
}

TEST_F(BadInputTest, TwoOrEmptyIdempotencyKeysAreRejectedBeforeSending) {
  struct Case {
    std::vector<std::string> keys;
    std::string message;
  };
  const Case cases[] = {
      {{"k1", "k2"}, "more than one idempotency-key"},
      {{"same", "same"}, "more than one idempotency-key"},
      {{""}, "idempotency-key must be 1 to 255"},
  };
  for (const Case& c : cases) {
    for (Api api : {Api::kSync, Api::kCallback}) {
      for (bool create : {false, true}) {
        FaultRequest req;
        req.set_op_id(Op("bad-keys"));
        FaultReply reply;
        grpc::ClientContext ctx;
        for (const std::string& k : c.keys)
          ctx.AddMetadata("idempotency-key", k);
        grpc::Status s = CallFault(stub_.get(), api, create, &ctx, req, &reply);
        EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
        EXPECT_TRUE(Contains(s.error_message(), c.message))
            << s.error_message();
        EXPECT_EQ(server_.Op(req.op_id()).attempts, 0);
      }
    }
  }
}

// Regression: a caller's idempotency key that is not a legal metadata value
// (a control character, non-ASCII bytes) passed rpcguard's checks, and gRPC
// aborted the process when the attempt carried it ("API misuse of type
// GRPC_CALL_ERROR_INVALID_METADATA", call_op_set.h). rpcguard validates the
// key, so it refuses it like an oversized one.
TEST_F(BadInputTest, IllegalIdempotencyKeyCharactersAreRejected) {
  for (const std::string& key :
       {std::string("a\nb"), std::string("tab\tkey"), std::string("cl\xc3\xa9"),
        std::string("nul\0key", 7), std::string("\x7f")}) {
    for (Api api : {Api::kSync, Api::kCallback}) {
      for (bool create : {false, true}) {
        FaultRequest req;
        req.set_op_id(Op("illegal-key"));
        FaultReply reply;
        grpc::ClientContext ctx;
        ctx.AddMetadata("idempotency-key", key);
        grpc::Status s = CallFault(stub_.get(), api, create, &ctx, req, &reply);
        EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
        EXPECT_EQ(s.error_message(),
                  "rpcguard: idempotency-key must be printable ASCII "
                  "(0x20-0x7E)");
        EXPECT_EQ(server_.Op(req.op_id()).attempts, 0);
      }
    }
  }
  // Every printable character is fine, space included.
  FaultRequest req;
  req.set_op_id(Op("printable-key"));
  FaultReply reply;
  grpc::ClientContext ctx;
  std::string printable;
  for (char c = 0x20; c < 0x7f; ++c) printable += c;
  ctx.AddMetadata("idempotency-key", printable);
  ASSERT_TRUE(
      CallFault(stub_.get(), Api::kSync, false, &ctx, req, &reply).ok());
  EXPECT_EQ(server_.Op(req.op_id()).keys, std::vector<std::string>{printable});
}

TEST_F(BadInputTest, CallersPassThroughHeaderIsHonouredAndNotSent) {
  FaultRequest req;
  req.set_op_id(Op("raw-passthrough"));
  req.set_fail_first(1);
  FaultReply reply;
  grpc::ClientContext ctx;
  ctx.AddMetadata("rpcguard-passthrough", "anything");
  grpc::Status s = CallFault(stub_.get(), Api::kSync, false, &ctx, req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server_.Op(req.op_id()).attempts, 1);
}

// ---------------------------------------------------------------------------
// Huge idempotency keys.

TEST_F(BadInputTest, LongestAllowedKeyIsSentIntact) {
  const std::string key(kMaxIdempotencyKeyLength, 'k');
  for (bool create : {false, true}) {
    FaultRequest req;
    req.set_op_id(Op("key-255"));
    req.set_fail_first(create ? 0 : 1);
    FaultReply reply;
    grpc::ClientContext ctx;
    ctx.AddMetadata("idempotency-key", key);
    grpc::Status s =
        CallFault(stub_.get(), Api::kCallback, create, &ctx, req, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
    const auto op = server_.Op(req.op_id());
    ASSERT_EQ(op.attempts, create ? 1 : 2);
    for (const std::string& k : op.keys) EXPECT_EQ(k, key);
  }
}

TEST_F(BadInputTest, OversizedKeysAreRejectedBeforeSending) {
  for (size_t size :
       {kMaxIdempotencyKeyLength + 1, size_t{64} << 10, size_t{1} << 20}) {
    for (Api api : {Api::kSync, Api::kCallback}) {
      for (bool create : {false, true}) {
        FaultRequest req;
        req.set_op_id(Op("huge-key"));
        FaultReply reply;
        grpc::ClientContext ctx;
        ctx.AddMetadata("idempotency-key", std::string(size, 'k'));
        const absl::Time start = absl::Now();
        grpc::Status s = CallFault(stub_.get(), api, create, &ctx, req, &reply);
        EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << size;
        EXPECT_TRUE(Contains(s.error_message(), absl::StrCat("got ", size)))
            << s.error_message();
        EXPECT_LT(absl::Now() - start, absl::Seconds(1));
        EXPECT_EQ(server_.Op(req.op_id()).attempts, 0);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Interceptor factories shared by many channels, destroyed early.

// Lets many channels use one factory that the application keeps (gRPC takes
// ownership of the factories it is given, one set per channel).
class ForwardingFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ForwardingFactory(
      grpc::experimental::ClientInterceptorFactoryInterface* target)
      : target_(target) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return target_->CreateClientInterceptor(info);
  }

 private:
  grpc::experimental::ClientInterceptorFactoryInterface* const target_;
};

// One callback call that owns everything it needs and deletes itself in its
// completion, as many applications write them: its ClientContext (which
// holds the last reference to the channel once the application dropped
// its own) dies on a gRPC thread, inside the completion.
struct SelfDeletingCall {
  grpc::ClientContext ctx;
  FaultRequest req;
  FaultReply reply;
  std::atomic<int>* ok = nullptr;
  std::atomic<int>* remaining = nullptr;
  absl::Notification* all_done = nullptr;

  void Start(FaultService::Stub* stub) {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    stub->async()->Get(&ctx, &req, &reply, [this](grpc::Status s) {
      if (s.ok() && reply.attempts_seen() == 3) ++*ok;
      std::atomic<int>* left = remaining;
      absl::Notification* done = all_done;
      delete this;
      if (left->fetch_sub(1) == 1) done->Notify();
    });
  }
};

// The config for the factory tests: each call fails twice and waits out two
// backoffs of at least 40 ms (A6 jitter), so calls are in flight (mostly in
// a backoff) when the factory and channels go away.
constexpr char kSlowBackoffConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.FaultService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.05s",
                   "maxBackoff": "0.1s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE"]},
   "rpcguard": {"jitter": "A6"}}
]})json";

constexpr int kChannels = 20;
constexpr int kCallsPerChannel = 10;

TEST_F(BadInputTest, OneFactoryForManyChannelsDestroyedWhileCallsRun) {
  auto factory = MakeInterceptorFactory(MakeOptions(kSlowBackoffConfig));
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<FaultService::Stub>> stubs;
  for (int i = 0; i < kChannels; ++i) {
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        factories;
    factories.push_back(std::make_unique<ForwardingFactory>(factory.get()));
    grpc::ChannelArguments args;
    // Distinct channels all the way down (no shared subchannel).
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("rpcguard.test.channel", i);
    channels.push_back(grpc::experimental::CreateCustomChannelWithInterceptors(
        server_.address(), grpc::InsecureChannelCredentials(), args,
        std::move(factories)));
    stubs.push_back(FaultService::NewStub(channels.back()));
  }
  std::atomic<int> ok{0};
  std::atomic<int> remaining{kChannels * kCallsPerChannel};
  absl::Notification all_done;
  for (int i = 0; i < kChannels * kCallsPerChannel; ++i) {
    auto* call = new SelfDeletingCall;
    call->req.set_op_id(absl::StrCat("shared-factory-", i));
    call->req.set_fail_first(2);
    call->ok = &ok;
    call->remaining = &remaining;
    call->all_done = &all_done;
    call->Start(stubs[i % kChannels].get());
  }
  // Every call has its interceptor: the factory may go. Then the stubs and
  // the application's channel references: the calls' contexts keep the
  // channels alive, and the last one dies inside a completion.
  factory.reset();
  const int in_flight = remaining.load();
  stubs.clear();
  channels.clear();
  EXPECT_GT(in_flight, 0) << "the test must destroy things mid-flight";
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(ok.load(), kChannels * kCallsPerChannel);
  for (int i = 0; i < kChannels * kCallsPerChannel; ++i) {
    EXPECT_EQ(server_.Op(absl::StrCat("shared-factory-", i)).attempts, 3);
  }
}

TEST_F(BadInputTest, FactoryPerChannelAllDroppedWhileCallsRun) {
  // The same with what CreateChannel builds: a factory per channel, owned by
  // the channel, gone with the channel's last reference.
  Options options = MakeOptions(kSlowBackoffConfig);
  std::vector<std::unique_ptr<FaultService::Stub>> stubs;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("rpcguard.test.channel", i);
    auto channel = CreateChannel(
        server_.address(), grpc::InsecureChannelCredentials(), options, args);
    ASSERT_TRUE(channel.ok()) << channel.status();
    stubs.push_back(FaultService::NewStub(*channel));
  }
  std::atomic<int> ok{0};
  std::atomic<int> remaining{kChannels * kCallsPerChannel};
  absl::Notification all_done;
  for (int i = 0; i < kChannels * kCallsPerChannel; ++i) {
    auto* call = new SelfDeletingCall;
    call->req.set_op_id(absl::StrCat("owned-factory-", i));
    call->req.set_fail_first(2);
    call->ok = &ok;
    call->remaining = &remaining;
    call->all_done = &all_done;
    call->Start(stubs[i % kChannels].get());
  }
  const int in_flight = remaining.load();
  stubs.clear();  // the stubs held the application's only channel references
  EXPECT_GT(in_flight, 0);
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(ok.load(), kChannels * kCallsPerChannel);
}

TEST_F(BadInputTest, CancelEveryCallWhileItsChannelIsGone) {
  // Calls in a backoff, their channel references dropped, then cancelled
  // from another thread: each ends CANCELLED at once, nothing more is sent.
  // At once: all within 500 ms on a quiet machine, or as soon as the
  // control's: as many plain channel's calls, held by the server, cancelled
  // from another thread in the same moment.
  Options options = MakeOptions(R"json({"methodConfig": [
    {"name": [{"service": "rpcguard.testing.v1.FaultService"}],
     "retryPolicy": {"maxAttempts": 4, "initialBackoff": "1s",
                     "maxBackoff": "1s", "backoffMultiplier": 2,
                     "retryableStatusCodes": ["UNAVAILABLE"]},
     "rpcguard": {"idempotency": "IDEMPOTENT", "jitter": "A6"}}]})json");
  constexpr int kCalls = 50;
  struct One {
    grpc::ClientContext ctx;
    FaultRequest req;
    FaultReply reply;
    grpc::Status status;
    absl::Time end;
    absl::Notification done;
  };
  int measurement = 0;
  ExpectWithinControl(
      "time for every call to end after the cancel", absl::Milliseconds(500),
      [&] {
        const std::string prefix =
            absl::StrCat("cancel-orphan-", ++measurement, "-");
        auto channel = CreateChannel(
            server_.address(), grpc::InsecureChannelCredentials(), options);
        EXPECT_TRUE(channel.ok());
        if (!channel.ok()) return Timing{};
        auto stub = FaultService::NewStub(*channel);
        std::vector<std::unique_ptr<One>> calls;
        for (int i = 0; i < kCalls; ++i) {
          auto one = std::make_unique<One>();
          one->req.set_op_id(absl::StrCat(prefix, i));
          one->req.set_fail_first(1);
          One* p = one.get();
          stub->async()->Get(&p->ctx, &p->req, &p->reply, [p](grpc::Status s) {
            p->status = std::move(s);
            p->end = absl::Now();
            p->done.Notify();
          });
          calls.push_back(std::move(one));
        }
        std::vector<std::unique_ptr<ControlCall>> controls;
        for (int i = 0; i < kCalls; ++i) {
          controls.push_back(std::make_unique<ControlCall>(
              StubKind::kCallback, plain_.get(),
              ControlCall::Held(absl::Seconds(3))));
        }
        stub.reset();
        channel->reset();
        // Every call's first attempt failed: all are in their 0.8-1.2 s
        // backoff; every control's call is at the server.
        const absl::Time limit = absl::Now() + absl::Seconds(5);
        for (int i = 0; i < kCalls && absl::Now() < limit; ++i) {
          while ((server_.Op(absl::StrCat(prefix, i)).attempts < 1 ||
                  server_.Op(controls[i]->op_id()).attempts < 1) &&
                 absl::Now() < limit) {
            absl::SleepFor(absl::Milliseconds(1));
          }
        }
        const absl::Time control_cancelled_at = absl::Now();
        std::thread control_canceller([&] {
          for (auto& control : controls) control->Cancel();
        });
        const absl::Time cancelled_at = absl::Now();
        std::thread canceller([&] {
          for (auto& one : calls) one->ctx.TryCancel();
        });
        control_canceller.join();
        canceller.join();
        absl::Time last_end = cancelled_at;
        for (auto& one : calls) {
          if (!one->done.WaitForNotificationWithTimeout(absl::Seconds(5))) {
            ADD_FAILURE() << one->req.op_id() << " still running 5 s after the "
                          << "cancel";
            one->done.WaitForNotification();
          }
          EXPECT_EQ(one->status.error_code(), grpc::StatusCode::CANCELLED);
          last_end = std::max(last_end, one->end);
        }
        absl::Time control_last_end = control_cancelled_at;
        for (auto& control : controls) {
          EXPECT_EQ(control->Wait().error_code(), grpc::StatusCode::CANCELLED);
          control_last_end = std::max(control_last_end, control->end());
        }
        absl::SleepFor(absl::Milliseconds(1300));  // past every backoff
        for (int i = 0; i < kCalls; ++i) {
          EXPECT_EQ(server_.Op(absl::StrCat(prefix, i)).attempts, 1);
        }
        return Timing{last_end - cancelled_at,
                      control_last_end - control_cancelled_at};
      });
}

}  // namespace
}  // namespace rpcguard
