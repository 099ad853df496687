// Copyright rpcguard authors.
//
// Give-ups that travel up a chain of services (server.h), end to end: real
// gRPC servers on loopback, a store, a middle service whose handler calls
// the store through rpcguard, and a front client calling the middle through
// rpcguard, each hop with 3 attempts. The middle runs on each server API
// (sync, CQ-async, callback). Also the helper for servers that shed load,
// what gRPC's own retry makes of it, hedges not multiplied, and the
// adaptive throttle of an overloaded destination.

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/rpcguard/testing/v1/declared.grpc.pb.h"
#include "rpcguard/decision/server_hints.h"
#include "rpcguard/internal/grpc/server_calls.h"
#include "rpcguard/internal/grpc_1_51/context.h"
#include "rpcguard/rpcguard.h"
#include "tests/testing/guarded_channel.h"

namespace rpcguard {
namespace {

using ::google::protobuf::Empty;
using ::rpcguard::testing::CreateGuardedChannel;
using ::rpcguard::testing::v1::Plain;

// Both hops: Plain.Level is IDEMPOTENT (idempotency_level), Plain.Nothing is
// undeclared (sent once).
constexpr char kConfig[] = R"json({"methodConfig": [
  {"name": [{"service": "rpcguard.testing.v1.Plain"}],
   "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s",
                   "maxBackoff": "0.05s", "backoffMultiplier": 2,
                   "retryableStatusCodes": ["UNAVAILABLE",
                                            "RESOURCE_EXHAUSTED"]}}]})json";

std::chrono::system_clock::time_point In(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

// The store: every call runs `answer` (UNAVAILABLE by default).
class Store final : public Plain::Service {
 public:
  grpc::Status Level(grpc::ServerContext* ctx, const Empty*, Empty*) override {
    ++level_calls;
    RecordMetadata(*ctx);
    return answer(ctx);
  }
  grpc::Status Nothing(grpc::ServerContext* ctx, const Empty*,
                       Empty*) override {
    ++nothing_calls;
    RecordMetadata(*ctx);
    return nothing_answer ? nothing_answer(ctx) : answer(ctx);
  }

  std::function<grpc::Status(grpc::ServerContext*)> answer =
      [](grpc::ServerContext*) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "store down");
      };
  // Nothing's answer, when set; `answer` otherwise.
  std::function<grpc::Status(grpc::ServerContext*)> nothing_answer;
  std::atomic<int> level_calls{0};
  std::atomic<int> nothing_calls{0};

  // How many of the calls that reached the store carried `key`.
  int CallsWith(absl::string_view key) {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const auto& keys : received_) n += keys.count(std::string(key));
    return n;
  }

 private:
  // What the service below sees: every initial metadata key of every call.
  void RecordMetadata(const grpc::ServerContext& ctx) {
    std::multiset<std::string> keys;
    for (const auto& [k, v] : ctx.client_metadata()) {
      keys.emplace(k.data(), k.size());
    }
    absl::MutexLock lock(&mu_);
    received_.push_back(std::move(keys));
  }

  absl::Mutex mu_;
  std::vector<std::multiset<std::string>> received_ ABSL_GUARDED_BY(mu_);
};

// How the middle's handler makes and uses its outgoing call.
struct Behavior {
  // The child context: ClientContext::FromServerContext (or
  // FromCallbackServerContext), or a plain one linked by LinkToServerCall.
  bool explicit_link = false;
  // Answers OK when the store fails (a fallback).
  bool fallback = false;
  // Calls the store's Nothing (sent once) instead of Level.
  bool call_nothing = false;
  // With explicit_link: LinkToServerCall twice on the child.
  bool link_twice = false;
  // With explicit_link: MarkPassThrough on the child, after linking it or
  // before.
  enum class PassThrough { kNo, kAfterLink, kBeforeLink };
  PassThrough pass_through = PassThrough::kNo;
};

// Whether rpcguard reads the parent call of a FromServerContext child (gRPC
// 1.51, fast paths compiled in). Without it only LinkToServerCall links: the
// tests then link explicitly, but for the one that checks the difference.
const bool kParentProbe = internal::ContextAccessKnowsThisGrpc();

// The middle's usual behavior: FromServerContext where rpcguard can read it.
Behavior Usual() {
  Behavior b;
  b.explicit_link = !kParentProbe;
  return b;
}

// A plain child context of `parent`, linked explicitly as `b` says.
std::unique_ptr<grpc::ClientContext> LinkedChild(
    grpc::ServerContextBase* parent, const Behavior& b) {
  auto child = std::make_unique<grpc::ClientContext>();
  child->set_deadline(parent->deadline());
  if (b.pass_through == Behavior::PassThrough::kBeforeLink) {
    MarkPassThrough(child.get());
  }
  LinkToServerCall(child.get(), parent);
  if (b.link_twice) LinkToServerCall(child.get(), parent);
  if (b.pass_through == Behavior::PassThrough::kAfterLink) {
    MarkPassThrough(child.get());
  }
  return child;
}

std::unique_ptr<grpc::ClientContext> ChildOf(grpc::ServerContext* parent,
                                             const Behavior& b) {
  if (!b.explicit_link) return grpc::ClientContext::FromServerContext(*parent);
  return LinkedChild(parent, b);
}

grpc::Status CallStore(Plain::Stub* store, grpc::ClientContext* child,
                       const Behavior& b) {
  Empty request, response;
  grpc::Status s = b.call_nothing ? store->Nothing(child, request, &response)
                                  : store->Level(child, request, &response);
  if (!s.ok() && b.fallback) return grpc::Status::OK;
  return s;
}

// The middle on the sync API.
class SyncMiddle final : public Plain::Service {
 public:
  SyncMiddle(Plain::Stub* store, Behavior b) : store_(store), b_(b) {}
  grpc::Status Level(grpc::ServerContext* ctx, const Empty*, Empty*) override {
    ++calls;
    auto child = ChildOf(ctx, b_);
    return CallStore(store_, child.get(), b_);
  }
  std::atomic<int> calls{0};

 private:
  Plain::Stub* const store_;
  const Behavior b_;
};

// The middle on the callback API: the outgoing call is a callback call too,
// and the reactor finishes from its completion.
class CallbackMiddle final : public Plain::CallbackService {
 public:
  CallbackMiddle(Plain::Stub* store, Behavior b) : store_(store), b_(b) {}
  grpc::ServerUnaryReactor* Level(grpc::CallbackServerContext* ctx,
                                  const Empty*, Empty*) override {
    ++calls;
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    struct Pending {
      std::unique_ptr<grpc::ClientContext> child;
      Empty request, response;
    };
    auto* p = new Pending;
    if (b_.explicit_link) {
      p->child = LinkedChild(ctx, b_);
    } else {
      p->child = grpc::ClientContext::FromCallbackServerContext(*ctx);
    }
    const Behavior b = b_;
    auto done = [p, reactor, b](grpc::Status s) {
      if (!s.ok() && b.fallback) s = grpc::Status::OK;
      delete p;
      reactor->Finish(s);
    };
    if (b_.call_nothing) {
      store_->async()->Nothing(p->child.get(), &p->request, &p->response, done);
    } else {
      store_->async()->Level(p->child.get(), &p->request, &p->response, done);
    }
    return reactor;
  }
  std::atomic<int> calls{0};

 private:
  Plain::Stub* const store_;
  const Behavior b_;
};

// The middle on the CQ-async API: one thread serves the queue, one call at a
// time, making its outgoing call on the sync stub.
class AsyncMiddle {
 public:
  AsyncMiddle(Plain::Stub* store, Behavior b) : store_(store), b_(b) {}
  Plain::AsyncService* service() { return &service_; }
  void Run(grpc::ServerCompletionQueue* cq) {
    cq_ = cq;
    thread_ = std::thread([this] { Loop(); });
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  std::atomic<int> calls{0};

 private:
  struct CallData {
    grpc::ServerContext ctx;
    Empty request, response;
    grpc::ServerAsyncResponseWriter<Empty> responder{&ctx};
    bool finishing = false;
  };
  void Request() {
    auto* cd = new CallData;
    service_.RequestLevel(&cd->ctx, &cd->request, &cd->responder, cq_, cq_, cd);
  }
  void Loop() {
    Request();
    void* tag;
    bool ok;
    while (cq_->Next(&tag, &ok)) {
      auto* cd = static_cast<CallData*>(tag);
      if (!ok || cd->finishing) {
        delete cd;
        continue;
      }
      Request();
      ++calls;
      auto child = ChildOf(&cd->ctx, b_);
      const grpc::Status s = CallStore(store_, child.get(), b_);
      cd->finishing = true;
      cd->responder.Finish(cd->response, s, cd);
    }
  }

  Plain::Stub* const store_;
  const Behavior b_;
  Plain::AsyncService service_;
  grpc::ServerCompletionQueue* cq_ = nullptr;
  std::thread thread_;
};

enum class Api { kSync, kAsync, kCallback };

std::string ApiName(const ::testing::TestParamInfo<Api>& info) {
  switch (info.param) {
    case Api::kSync:
      return "Sync";
    case Api::kAsync:
      return "Async";
    case Api::kCallback:
      return "Callback";
  }
  return "?";
}

// A store, a middle on the API under test, and rpcguard channels between.
class Chain {
 public:
  Chain(Api api, Behavior b, bool server_interceptor = true,
        ServerOptions server_options = {}) {
    registry_ = *BreakerRegistry::Create({});
    grpc::ServerBuilder sb;
    sb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                        &store_port_);
    sb.RegisterService(&store);
    store_server_ = sb.BuildAndStart();

    store_channel_ = *CreateGuardedChannel(
        absl::StrCat("127.0.0.1:", store_port_), kConfig,
        [this](Options& o) { o.breaker_registry = registry_; });
    store_stub_ = Plain::NewStub(store_channel_);

    grpc::ServerBuilder mb;
    mb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                        &middle_port_);
    std::unique_ptr<grpc::ServerCompletionQueue> cq;
    switch (api) {
      case Api::kSync:
        sync_ = std::make_unique<SyncMiddle>(store_stub_.get(), b);
        mb.RegisterService(sync_.get());
        break;
      case Api::kCallback:
        callback_ = std::make_unique<CallbackMiddle>(store_stub_.get(), b);
        mb.RegisterService(callback_.get());
        break;
      case Api::kAsync:
        async_ = std::make_unique<AsyncMiddle>(store_stub_.get(), b);
        mb.RegisterService(async_->service());
        cq_ = mb.AddCompletionQueue();
        break;
    }
    if (server_interceptor) {
      const absl::Status s = AddServerInterceptor(&mb, server_options);
      EXPECT_TRUE(s.ok()) << s;
    }
    middle_server_ = mb.BuildAndStart();
    if (async_) async_->Run(cq_.get());

    front_channel_ = *CreateGuardedChannel(
        absl::StrCat("127.0.0.1:", middle_port_), kConfig,
        [this](Options& o) { o.breaker_registry = registry_; });
    front_ = Plain::NewStub(front_channel_);
  }

  ~Chain() {
    middle_server_->Shutdown(In(absl::Seconds(1)));
    if (cq_) {
      cq_->Shutdown();
      async_->Join();
    }
    store_server_->Shutdown(In(absl::Seconds(1)));
  }

  // One call of the front client to the middle.
  grpc::Status Call(grpc::ClientContext* ctx = nullptr) {
    grpc::ClientContext own;
    if (ctx == nullptr) ctx = &own;
    ctx->set_deadline(In(absl::Seconds(10)));
    Empty request, response;
    grpc::Status s = front_->Level(ctx, request, &response);
    trailers_.clear();
    for (const auto& [k, v] : ctx->GetServerTrailingMetadata()) {
      trailers_.emplace(std::string(k.data(), k.size()),
                        std::string(v.data(), v.size()));
    }
    return s;
  }

  int middle_calls() const {
    if (sync_) return sync_->calls;
    if (callback_) return callback_->calls;
    return async_->calls;
  }
  std::string Trailer(const std::string& key) const {
    auto it = trailers_.find(key);
    return it == trailers_.end() ? "" : it->second;
  }
  int middle_port() const { return middle_port_; }

  Store store;

 private:
  std::shared_ptr<BreakerRegistry> registry_;
  int store_port_ = 0;
  int middle_port_ = 0;
  std::unique_ptr<grpc::Server> store_server_;
  std::shared_ptr<grpc::Channel> store_channel_;
  std::unique_ptr<Plain::Stub> store_stub_;
  std::unique_ptr<SyncMiddle> sync_;
  std::unique_ptr<CallbackMiddle> callback_;
  std::unique_ptr<AsyncMiddle> async_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::unique_ptr<grpc::Server> middle_server_;
  std::shared_ptr<grpc::Channel> front_channel_;
  std::unique_ptr<Plain::Stub> front_;
  std::multimap<std::string, std::string> trailers_;
};

// ServerCalls holds an entry only while a server call runs.
void ExpectNoServerCallsHeld() {
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (internal::ServerCalls::Get().size() != 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(internal::ServerCalls::Get().size(), 0u);
}

class FleetE2ETest : public ::testing::TestWithParam<Api> {};

INSTANTIATE_TEST_SUITE_P(ServerApis, FleetE2ETest,
                         ::testing::Values(Api::kSync, Api::kAsync,
                                           Api::kCallback),
                         ApiName);

TEST_P(FleetE2ETest, AGiveUpTravelsUpOnce) {
  const uint64_t before =
      ServerSignalsSnapshot()
          .stops_sent[static_cast<int>(GiveUpReason::kMaxAttempts)];
  Chain chain(GetParam(), Usual());
  const grpc::Status s = chain.Call();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  // Only the tier right above the store retried.
  EXPECT_EQ(chain.store.level_calls, 3);
  EXPECT_EQ(chain.middle_calls(), 1);
  EXPECT_EQ(chain.Trailer(kPushbackTrailer), "-1");
  EXPECT_EQ(chain.Trailer(kGaveUpTrailer), "max_attempts");
  EXPECT_TRUE(absl::StrContains(s.error_message(),
                                "[rpcguard: 1 attempt, gave up: "
                                "downstream_gave_up]"))
      << s.error_message();
  EXPECT_EQ(ServerSignalsSnapshot()
                .stops_sent[static_cast<int>(GiveUpReason::kMaxAttempts)],
            before + 1);
  // Exported as a metric family.
  EXPECT_TRUE(absl::StrContains(
      ToPrometheusText(ServerSignalsSnapshot()),
      absl::StrCat("rpcguard_server_stops_sent_total{reason=\"max_attempts\"} ",
                   before + 1, "\n")));
  ExpectNoServerCallsHeld();
}

TEST_P(FleetE2ETest, WithoutTheServerInterceptorAttemptsMultiply) {
  // The same chain as today's rpcguard without the server side: 3 x 3.
  Chain chain(GetParam(), Usual(), /*server_interceptor=*/false);
  const grpc::Status s = chain.Call();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(chain.store.level_calls, 9);
  EXPECT_EQ(chain.middle_calls(), 3);
  EXPECT_EQ(chain.Trailer(kPushbackTrailer), "");
}

TEST_P(FleetE2ETest, FromServerContextAloneLinksOnGrpc151) {
  // No LinkToServerCall: only rpcguard's read of the parent call links.
  Behavior b;
  b.explicit_link = false;
  Chain chain(GetParam(), b);
  EXPECT_EQ(chain.Call().error_code(), grpc::StatusCode::UNAVAILABLE);
  // Built for another gRPC (or with the fast paths compiled out), the
  // parent is not known: the failure passes up as without rpcguard.
  EXPECT_EQ(chain.store.level_calls, kParentProbe ? 3 : 9);
  EXPECT_EQ(chain.Trailer(kGaveUpTrailer), kParentProbe ? "max_attempts" : "");
}

TEST_P(FleetE2ETest, AnExplicitLinkWorksWithoutTheParentProbe) {
  Behavior b;
  b.explicit_link = true;
  Chain chain(GetParam(), b);
  EXPECT_EQ(chain.Call().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(chain.store.level_calls, 3);
  EXPECT_EQ(chain.middle_calls(), 1);
  EXPECT_EQ(chain.Trailer(kGaveUpTrailer), "max_attempts");
  ExpectNoServerCallsHeld();
}

// The link is rpcguard's private metadata between LinkToServerCall and its
// client interceptor: the service below never sees it, however the child
// was linked (the interceptor erases every entry, whatever the call's mode;
// with gRPC 1.51's fast paths LinkToServerCall and MarkPassThrough also
// keep at most one).
TEST_P(FleetE2ETest, TheLinkNeverLeavesTheProcessWhenLinkedTwice) {
  Behavior b;
  b.explicit_link = true;
  b.link_twice = true;
  Chain chain(GetParam(), b);
  EXPECT_EQ(chain.Call().error_code(), grpc::StatusCode::UNAVAILABLE);
  // Linked all the same: only the middle retried.
  EXPECT_EQ(chain.store.level_calls, 3);
  EXPECT_EQ(chain.Trailer(kGaveUpTrailer), "max_attempts");
  EXPECT_EQ(chain.store.CallsWith(internal::kServerCallLinkHeader), 0);
  ExpectNoServerCallsHeld();
}

TEST_P(FleetE2ETest, TheLinkNeverLeavesTheProcessOfAPassThroughCall) {
  for (Behavior::PassThrough when : {Behavior::PassThrough::kAfterLink,
                                     Behavior::PassThrough::kBeforeLink}) {
    Behavior b;
    b.explicit_link = true;
    b.pass_through = when;
    Chain chain(GetParam(), b);
    EXPECT_EQ(chain.Call().error_code(), grpc::StatusCode::UNAVAILABLE);
    // Not rpcguard's call: its failure passes up as without rpcguard.
    EXPECT_EQ(chain.Trailer(kGaveUpTrailer), "");
    EXPECT_GT(chain.store.level_calls, 0);
    EXPECT_EQ(chain.store.CallsWith(internal::kServerCallLinkHeader), 0)
        << (when == Behavior::PassThrough::kAfterLink ? "after" : "before");
    EXPECT_EQ(chain.store.CallsWith(kPassThroughHeader), 0);
  }
}

TEST_P(FleetE2ETest, AHandlerThatRecoveredSendsNothing) {
  Behavior b = Usual();
  b.fallback = true;
  Chain chain(GetParam(), b);
  EXPECT_TRUE(chain.Call().ok());
  EXPECT_EQ(chain.store.level_calls, 3);
  EXPECT_EQ(chain.Trailer(kPushbackTrailer), "");
  EXPECT_EQ(chain.Trailer(kGaveUpTrailer), "");
}

TEST_P(FleetE2ETest, ACallSentOncePassesItsFailureUpAsBefore) {
  // The middle's outgoing call may not repeat: nothing was retried below,
  // so the front retries the middle as it would without rpcguard.
  Behavior b = Usual();
  b.call_nothing = true;
  Chain chain(GetParam(), b);
  EXPECT_EQ(chain.Call().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(chain.store.nothing_calls, 3);
  EXPECT_EQ(chain.middle_calls(), 3);
  EXPECT_EQ(chain.Trailer(kPushbackTrailer), "");
}

TEST_P(FleetE2ETest, AStopFromBelowCrossesACallSentOnce) {
  // The store says "do not retry"; the middle's call was sent once
  // (undeclared), and its failure still tells the front not to retry.
  Behavior b = Usual();
  b.call_nothing = true;
  Chain chain(GetParam(), b);
  chain.store.answer = [](grpc::ServerContext* ctx) {
    return Overloaded(ctx, "shedding");
  };
  EXPECT_EQ(chain.Call().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(chain.store.nothing_calls, 1);
  EXPECT_EQ(chain.middle_calls(), 1);
  EXPECT_EQ(chain.Trailer(kGaveUpTrailer), "pushback_stop");
}

TEST_P(FleetE2ETest, AnEdgeServiceSendsNeitherTrailer) {
  ServerOptions edge;
  edge.edge = true;
  Chain chain(GetParam(), Usual(), /*server_interceptor=*/true, edge);
  EXPECT_EQ(chain.Call().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(chain.Trailer(kPushbackTrailer), "");
  EXPECT_EQ(chain.Trailer(kGaveUpTrailer), "");
  EXPECT_EQ(chain.middle_calls(), 3);
  EXPECT_EQ(chain.store.level_calls, 9);
}

TEST_P(FleetE2ETest, WhichReasonsTravelIsTheServersChoice) {
  ServerOptions options;
  options.propagate = {GiveUpReason::kBreakerOpen};
  Chain chain(GetParam(), Usual(), /*server_interceptor=*/true, options);
  EXPECT_EQ(chain.Call().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(chain.Trailer(kGaveUpTrailer), "");
  EXPECT_EQ(chain.store.level_calls, 9);
}

// A middle whose handler makes two outgoing calls, one after the other,
// and fails with the second's status: Nothing (sent once), answered with a
// stop (pushback_stop), and Level, whose 3 attempts fail (max_attempts); in
// that order or the other.
class TwoChildrenMiddle final : public Plain::Service {
 public:
  TwoChildrenMiddle(Plain::Stub* store, bool nothing_first)
      : store_(store), nothing_first_(nothing_first) {}
  grpc::Status Level(grpc::ServerContext* ctx, const Empty*, Empty*) override {
    grpc::Status s;
    for (bool nothing : {nothing_first_, !nothing_first_}) {
      Behavior b = Usual();
      b.call_nothing = nothing;
      auto child = ChildOf(ctx, b);
      s = CallStore(store_, child.get(), b);
    }
    return s;
  }

 private:
  Plain::Stub* const store_;
  const bool nothing_first_;
};

class FirstGiveUpTest : public ::testing::TestWithParam<bool> {};

INSTANTIATE_TEST_SUITE_P(Orders, FirstGiveUpTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "StopFirst" : "AttemptsFirst";
                         });

TEST_P(FirstGiveUpTest, TheFirstGiveUpNamesTheFailure) {
  const bool stop_first = GetParam();
  // pushback_stop's enum value is above max_attempts': the order of the
  // calls, not of the enum, must decide.
  ASSERT_GT(static_cast<int>(GiveUpReason::kPushbackStop),
            static_cast<int>(GiveUpReason::kMaxAttempts));
  const GiveUpReason first =
      stop_first ? GiveUpReason::kPushbackStop : GiveUpReason::kMaxAttempts;
  const GiveUpReason second =
      stop_first ? GiveUpReason::kMaxAttempts : GiveUpReason::kPushbackStop;
  Store store;
  store.nothing_answer = [](grpc::ServerContext* ctx) {
    return Overloaded(ctx, "shedding");
  };
  int store_port = 0, middle_port = 0;
  grpc::ServerBuilder sb;
  sb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                      &store_port);
  sb.RegisterService(&store);
  auto store_server = sb.BuildAndStart();
  auto channel = *CreateGuardedChannel(
      absl::StrCat("127.0.0.1:", store_port), kConfig,
      [](Options& o) { o.breaker_registry = *BreakerRegistry::Create({}); });
  auto store_stub = Plain::NewStub(channel);
  TwoChildrenMiddle middle(store_stub.get(), stop_first);
  grpc::ServerBuilder mb;
  mb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                      &middle_port);
  mb.RegisterService(&middle);
  ASSERT_TRUE(AddServerInterceptor(&mb).ok());
  auto middle_server = mb.BuildAndStart();

  const ServerSignals before = ServerSignalsSnapshot();
  // A plain caller, to read what the middle sent.
  auto front = Plain::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", middle_port),
                          grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(10)));
  Empty req, resp;
  EXPECT_FALSE(front->Level(&ctx, req, &resp).ok());
  EXPECT_EQ(store.nothing_calls, 1);
  EXPECT_EQ(store.level_calls, 3);
  auto it = ctx.GetServerTrailingMetadata().find(kGaveUpTrailer);
  ASSERT_NE(it, ctx.GetServerTrailingMetadata().end());
  EXPECT_EQ(std::string(it->second.data(), it->second.size()),
            std::string(GiveUpReasonName(first)));
  const ServerSignals after = ServerSignalsSnapshot();
  EXPECT_EQ(after.stops_sent[static_cast<int>(first)],
            before.stops_sent[static_cast<int>(first)] + 1);
  EXPECT_EQ(after.stops_sent[static_cast<int>(second)],
            before.stops_sent[static_cast<int>(second)]);
  middle_server->Shutdown(In(absl::Seconds(1)));
  store_server->Shutdown(In(absl::Seconds(1)));
}

TEST(FleetOptionsTest, BadServerOptionsAreRefused) {
  ServerOptions options;
  options.propagate = {GiveUpReason::kMaxAttempts, GiveUpReason::kNone};
  grpc::ServerBuilder builder;
  const absl::Status s = AddServerInterceptor(&builder, options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "ServerOptions.propagate[1]: none is not a give-up reason");
  options.propagate = {static_cast<GiveUpReason>(99)};
  EXPECT_FALSE(MakeServerInterceptorFactory(options).ok());
}

// Counts the server calls it sees.
class CountingInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CountingInterceptorFactory(std::atomic<int>* calls)
      : calls_(calls) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo*) override {
    ++*calls_;
    return new Proceed;
  }

 private:
  struct Proceed final : grpc::experimental::Interceptor {
    void Intercept(grpc::experimental::InterceptorBatchMethods* b) override {
      b->Proceed();
    }
  };
  std::atomic<int>* const calls_;
};

TEST(FleetOptionsTest, ASecondAddServerInterceptorIsRefusedAndDropsNothing) {
  std::atomic<int> seen{0};
  Store store;
  store.answer = [](grpc::ServerContext*) { return grpc::Status::OK; };
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&store);
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      mine;
  mine.push_back(std::make_unique<CountingInterceptorFactory>(&seen));
  ASSERT_TRUE(AddServerInterceptor(&builder, {}, std::move(mine)).ok());
  // SetInterceptorCreators replaces the list: a second call would drop the
  // first call's interceptors (and rpcguard's own).
  const absl::Status again = AddServerInterceptor(&builder);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.message(),
            "AddServerInterceptor: called twice on one grpc::ServerBuilder; "
            "the first call's interceptors are kept (pass all of the "
            "server's interceptors in one call)");
  auto server = builder.BuildAndStart();
  auto stub = Plain::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  Empty req, resp;
  EXPECT_TRUE(stub->Level(&ctx, req, &resp).ok());
  EXPECT_EQ(seen, 1);
  server->Shutdown(In(absl::Seconds(1)));
  // Another builder is another server: accepted.
  grpc::ServerBuilder other;
  EXPECT_TRUE(AddServerInterceptor(&other).ok());
}

// A server that sheds load with Overloaded(): rpcguard and gRPC's own retry
// both obey it.
class ShedTest : public ::testing::Test {
 protected:
  ShedTest() {
    grpc::ServerBuilder sb;
    sb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                        &port_);
    sb.RegisterService(&store_);
    server_ = sb.BuildAndStart();
  }
  ~ShedTest() override { server_->Shutdown(In(absl::Seconds(1))); }

  std::string target() const { return absl::StrCat("127.0.0.1:", port_); }

  // A channel with gRPC's own retry: 3 attempts on RESOURCE_EXHAUSTED.
  std::shared_ptr<grpc::Channel> GrpcRetryChannel() {
    grpc::ChannelArguments args;
    args.SetServiceConfigJSON(R"json({"methodConfig": [
      {"name": [{"service": "rpcguard.testing.v1.Plain"}],
       "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s",
                       "maxBackoff": "0.05s", "backoffMultiplier": 2,
                       "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]})json");
    return grpc::CreateCustomChannel(target(),
                                     grpc::InsecureChannelCredentials(), args);
  }

  Store store_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(ShedTest, GrpcsOwnRetryObeysDoNotRetry) {
  auto stub = Plain::NewStub(GrpcRetryChannel());
  // Control: a plain RESOURCE_EXHAUSTED is retried.
  store_.answer = [](grpc::ServerContext*) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "busy");
  };
  {
    grpc::ClientContext ctx;
    Empty req, resp;
    EXPECT_EQ(stub->Level(&ctx, req, &resp).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(store_.level_calls, 3);
  }
  store_.level_calls = 0;
  store_.answer = [](grpc::ServerContext* ctx) {
    return Overloaded(ctx, "shedding");
  };
  grpc::ClientContext ctx;
  Empty req, resp;
  EXPECT_EQ(stub->Level(&ctx, req, &resp).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(store_.level_calls, 1);
}

TEST_F(ShedTest, RpcguardObeysDoNotRetry) {
  auto channel = *CreateGuardedChannel(target(), kConfig, [](Options& o) {
    o.breaker_registry = *BreakerRegistry::Create({});
  });
  auto stub = Plain::NewStub(channel);
  store_.answer = [](grpc::ServerContext* ctx) {
    return Overloaded(ctx, "shedding");
  };
  grpc::ClientContext ctx;
  Empty req, resp;
  const grpc::Status s = stub->Level(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "gave up: pushback_stop"))
      << s.error_message();
  EXPECT_EQ(store_.level_calls, 1);
}

TEST_F(ShedTest, ADelayIsSentAsPushbackAndRetryInfo) {
  std::atomic<int> n{0};
  absl::Mutex mu;
  std::vector<absl::Time> arrivals;
  store_.answer = [&](grpc::ServerContext* ctx) {
    {
      absl::MutexLock lock(&mu);
      arrivals.push_back(absl::Now());
    }
    if (n++ == 0) return Overloaded(ctx, "later", absl::Milliseconds(80));
    return grpc::Status::OK;
  };
  // What is on the wire, read by a plain channel.
  {
    auto plain = Plain::NewStub(
        grpc::CreateChannel(target(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    Empty req, resp;
    const grpc::Status s = plain->Level(&ctx, req, &resp);
    ASSERT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    auto it = ctx.GetServerTrailingMetadata().find(kPushbackTrailer);
    ASSERT_NE(it, ctx.GetServerTrailingMetadata().end());
    EXPECT_EQ(std::string(it->second.data(), it->second.size()), "80");
    EXPECT_EQ(ParseRetryInfo(s.error_details()), absl::Milliseconds(80));
  }
  // rpcguard waits for it.
  n = 0;
  arrivals.clear();
  auto channel = *CreateGuardedChannel(target(), kConfig, [](Options& o) {
    o.breaker_registry = *BreakerRegistry::Create({});
  });
  auto stub = Plain::NewStub(channel);
  grpc::ClientContext ctx;
  Empty req, resp;
  EXPECT_TRUE(stub->Level(&ctx, req, &resp).ok());
  absl::MutexLock lock(&mu);
  ASSERT_EQ(arrivals.size(), 2u);
  EXPECT_GE(arrivals[1] - arrivals[0], absl::Milliseconds(75));
}

// What Overloaded(ctx, "later", retry_after) puts on the wire, read by a
// plain channel: the pushback trailer and the RetryInfo's delay.
struct Sent {
  std::string pushback;
  std::optional<absl::Duration> retry_info;
};

class OverloadedDelayTest : public ShedTest {
 protected:
  Sent Send(absl::Duration retry_after) {
    store_.answer = [retry_after](grpc::ServerContext* ctx) {
      return Overloaded(ctx, "later", retry_after);
    };
    auto plain = Plain::NewStub(
        grpc::CreateChannel(target(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    Empty req, resp;
    const grpc::Status s = plain->Level(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    Sent sent;
    auto it = ctx.GetServerTrailingMetadata().find(kPushbackTrailer);
    if (it != ctx.GetServerTrailingMetadata().end()) {
      sent.pushback.assign(it->second.data(), it->second.size());
    }
    sent.retry_info = ParseRetryInfo(s.error_details());
    return sent;
  }
};

TEST_F(OverloadedDelayTest, AnEndlessDelayIsClampedToWhatEveryClientReads) {
  // INT32_MAX milliseconds (24.8 days): the most gRPC Java reads as a delay
  // (it parses an int; more is "do not retry"), and a valid Duration.
  for (absl::Duration d : {absl::InfiniteDuration(), absl::Hours(24 * 365)}) {
    const Sent sent = Send(d);
    EXPECT_EQ(sent.pushback, "2147483647") << d;
    EXPECT_EQ(sent.retry_info, absl::Milliseconds(2147483647)) << d;
  }
}

TEST_F(OverloadedDelayTest, ANegativeDelayMeansRetryAtOnce) {
  for (absl::Duration d : {absl::Milliseconds(-5), -absl::InfiniteDuration()}) {
    const Sent sent = Send(d);
    EXPECT_EQ(sent.pushback, "0") << d;
    EXPECT_EQ(sent.retry_info, absl::ZeroDuration()) << d;
  }
}

TEST_F(OverloadedDelayTest, TheDelayIsWholeMillisecondsRoundedUp) {
  // The trailer counts milliseconds: both carry the same delay, never less
  // than the one asked for.
  const Sent sent = Send(absl::Microseconds(1500));
  EXPECT_EQ(sent.pushback, "2");
  EXPECT_EQ(sent.retry_info, absl::Milliseconds(2));
}

// Hedges are not multiplied: a call made for a server call that is itself
// an attempt >= 2 of its caller is not hedged.
class HedgeChainTest : public ::testing::TestWithParam<bool> {};

TEST_P(HedgeChainTest, ACallMadeForARetryDoesNotHedge) {
  const bool repeated = GetParam();
  constexpr char kHedged[] = R"json({"methodConfig": [
    {"name": [{"service": "rpcguard.testing.v1.Plain", "method": "Level"}],
     "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.02s",
                       "nonFatalStatusCodes": ["UNAVAILABLE"]}}]})json";
  Store store;
  store.answer = [](grpc::ServerContext*) {
    absl::SleepFor(absl::Milliseconds(300));
    return grpc::Status::OK;
  };
  int store_port = 0, middle_port = 0;
  grpc::ServerBuilder sb;
  sb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                      &store_port);
  sb.RegisterService(&store);
  auto store_server = sb.BuildAndStart();
  auto channel = *CreateGuardedChannel(
      absl::StrCat("127.0.0.1:", store_port), kHedged,
      [](Options& o) { o.breaker_registry = *BreakerRegistry::Create({}); });
  auto store_stub = Plain::NewStub(channel);
  SyncMiddle middle(store_stub.get(), Usual());
  grpc::ServerBuilder mb;
  mb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                      &middle_port);
  mb.RegisterService(&middle);
  ASSERT_TRUE(AddServerInterceptor(&mb).ok());
  auto middle_server = mb.BuildAndStart();

  const uint64_t suppressed = ServerSignalsSnapshot().hedges_suppressed;
  // The caller's attempt number as rpcguard sends it, on a plain channel.
  auto front = Plain::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", middle_port),
                          grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata(kAttemptHeader, repeated ? "2" : "1");
  ctx.set_deadline(In(absl::Seconds(10)));
  Empty req, resp;
  EXPECT_TRUE(front->Level(&ctx, req, &resp).ok());
  EXPECT_EQ(store.level_calls, repeated ? 1 : 3);
  EXPECT_EQ(ServerSignalsSnapshot().hedges_suppressed,
            suppressed + (repeated ? 1 : 0));
  middle_server->Shutdown(In(absl::Seconds(1)));
  store_server->Shutdown(In(absl::Seconds(1)));
}

INSTANTIATE_TEST_SUITE_P(FirstOrRepeated, HedgeChainTest,
                         ::testing::Values(false, true));

// The adaptive throttle: a destination that rejects everything as
// overloaded gets far fewer attempts than its callers make, and the
// refusals say so; switched off, every call is sent.
class ThrottleE2ETest : public ShedTest {
 protected:
  // 100 calls of Plain.Nothing (undeclared: sent once); returns how many
  // were refused by the throttle. `rpcguard_object`: the config's top-level
  // "rpcguard" member, or empty.
  int Run(absl::string_view rpcguard_object) {
    const std::string config = absl::StrCat("{", rpcguard_object, "}");
    auto channel = CreateGuardedChannel(target(), config, [](Options& o) {
      o.breaker_registry = *BreakerRegistry::Create({});
    });
    EXPECT_TRUE(channel.ok()) << channel.status();
    if (!channel.ok()) return -1;
    auto stub = Plain::NewStub(*channel);
    int throttled = 0;
    for (int i = 0; i < 100; ++i) {
      grpc::ClientContext ctx;
      Empty req, resp;
      const grpc::Status s = stub->Nothing(&ctx, req, &resp);
      EXPECT_FALSE(s.ok());
      if (absl::StrContains(s.error_message(), "gave up: throttled")) {
        // The destination's own answer, given on its behalf: a caller above
        // must not read it as this client's server being down.
        EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
        ++throttled;
      }
    }
    return throttled;
  }
};

TEST_F(ThrottleE2ETest, AnOverloadedDestinationIsThrottled) {
  store_.answer = [](grpc::ServerContext*) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "busy");
  };
  const int throttled = Run("");
  // The first 20 (minRequests) are all sent; then nearly all refused.
  EXPECT_GT(throttled, 50);
  EXPECT_EQ(store_.nothing_calls, 100 - throttled);
}

TEST_F(ThrottleE2ETest, OffMeansOff) {
  store_.answer = [](grpc::ServerContext*) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "busy");
  };
  EXPECT_EQ(
      Run(R"json("rpcguard": {"adaptiveThrottling": {"enabled": false}})json"),
      0);
  EXPECT_EQ(store_.nothing_calls, 100);
}

TEST_F(ThrottleE2ETest, BadSettingsAreRefusedWithTheirPath) {
  auto config = Config::FromJson(
      R"json({"rpcguard": {"adaptiveThrottling": {"k": 0.5}}})json");
  ASSERT_FALSE(config.ok());
  EXPECT_TRUE(absl::StrContains(config.status().message(),
                                "rpcguard.adaptiveThrottling.k"))
      << config.status();
}

}  // namespace
}  // namespace rpcguard
