// Copyright rpcguard authors.
//
// How the retrying interceptor works
// ==================================
//
// gRPC's interceptor API has no "retry" operation: once an attempt has
// failed, the application's call has consumed its one response. The only way
// to retry from an interceptor is to *hijack* the call (see
// shared notes "interceptor-mechanics"):
//
//  1. The application's first batch carries send-initial-metadata, the
//     message and close together. RetryInterceptor captures what it needs to
//     replay the request (serialized message, metadata, deadline, credentials,
//     the channel below this interceptor) into a CallState, starts attempt 1
//     and calls Hijack(). From then on the application's call never reaches
//     gRPC core: rpcguard owns its outcome.
//  2. Every batch of the application's call that waits for results (receive
//     initial metadata, message, status) arrives with PRE_RECV_* hooks. Those
//     batches are *parked* in the CallState, not proceeded.
//  3. Each attempt is an ordinary asynchronous callback-API call on the
//     intercepted channel, with its own ClientContext (Attempt). When it ends,
//     the RetryController (pure logic, no gRPC objects) decides: done, retry
//     after a backoff (a grpc::Alarm, never a sleep), or give up.
//  4. When the call is decided, every parked batch is filled from the final
//     attempt (metadata, the deserialized message, the status with rpcguard's
//     annotation) and proceeded; batches arriving later are served at once.
//
// Calls that can never be retried (undeclared methods, streaming, marked
// pass-through) are not hijacked: rpcguard only adds its metadata and
// proceeds, which keeps their cost close to a pass-through interceptor.
//
// Callback-API calls that may be retried are not hijacked either, until a
// retry is needed ("riding"): attempt 1 is the application's own call, sent
// as is with rpcguard's metadata; rpcguard keeps a copy of the request and
// the application's response object, and holds the call's receive batch
// when gRPC hands it over (POST_RECV_STATUS). On success it lets it go
// (the no-failure path costs no second call); on a retriable failure
// attempts 2.. run as above and the held batch is filled from the final one
// (response parsed into the kept object, status and metadata replaced).
// Hijacking costs a second call, a second ClientContext and a round trip of
// the hijacked batches through gRPC: about +20% CPU per call here. Only the
// callback API can ride: the sync API reports UNIMPLEMENTED for an OK status
// whose message its own call did not receive (a flag interceptors cannot
// set), and the interceptor API does not say which API a call uses;
// IsCallbackUnaryCall tells them apart by where the status object lives.
// Calls with a per-attempt timeout or waitForReady are hijacked: neither
// can be put on the application's own call.
//
// Concurrency and lifetime rules, each learnt from a crash or a hang:
//  - CallState is shared (std::shared_ptr) by the interceptor and, while an
//    attempt runs, by itself (in_flight_: the attempt's callback holds a raw
//    pointer, which std::function stores without allocating), so it
//    outlives whichever finishes last. Alarm callbacks hold it weakly: an
//    Alarm keeps its callback until the Alarm is destroyed, and the
//    CallState owns its alarms.
//  - mu_ is never held across a gRPC call that may call back: Proceed, Hijack,
//    TryCancel, starting an attempt, setting or cancelling an alarm.
//  - A caller's cancel (PRE_SEND_CANCEL) arrives while gRPC holds the
//    application context's lock; acting on it inline crashed under ASan, so it
//    only records the cancel and defers the work to a zero-delay alarm.
//  - Nothing touches `this` (the interceptor) after Hijack() or after the
//    last Proceed(): the application may destroy its ClientContext, which
//    owns the interceptor, as soon as it sees the result.

#include "rpcguard/channel.h"

#include <grpcpp/alarm.h>
#include <grpcpp/channel.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/client_callback.h>
#include <grpcpp/version_info.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "rpcguard/internal/method_cache.h"
#include "rpcguard/internal/mutex.h"
#include "rpcguard/decision/retry_controller.h"
#include "rpcguard/internal/uuid.h"

namespace rpcguard {
namespace {

using grpc::experimental::ClientRpcInfo;
using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;

using Metadata = std::vector<std::pair<std::string, std::string>>;
// A call's parked batches: one or two for every unary API.
using Batches = absl::InlinedVector<InterceptorBatchMethods*, 2>;

// rpcguard's header names as std::string, built once: the metadata maps and
// ClientContext::AddMetadata take std::string keys, and a key built from a
// literal on every call allocates when it is longer than the small-string
// buffer (16 characters and up).
template <const char* kName>
const std::string& HeaderString() {
  static const std::string* const name = new std::string(kName);
  return *name;
}

// The stderr logfmt sink that Options::trace_sink defaults to: one for the
// process, so that transitions seen by several factories are written once.
std::shared_ptr<TraceSink> DefaultSink() {
  static const std::shared_ptr<TraceSink>* const sink =
      new std::shared_ptr<TraceSink>(std::make_shared<LogfmtSink>());
  return *sink;
}

// Whether this (sink, stats) pair has not yet recorded transition `t`.
// Channels of several factories share breakers; each factory's listener
// hears every transition, but a sink should write it once. Transitions are
// rare, so a process-wide lock is fine here (never on the call path).
bool FirstToSee(const TraceSink* sink, const Stats* stats,
                const BreakerTransition& t) {
  static absl::Mutex mu(absl::kConstInit);  // rare: transitions only
  static auto* const last_seen =
      new absl::flat_hash_map<std::string, uint64_t>();
  const std::string key =
      absl::StrCat(reinterpret_cast<uintptr_t>(sink), "/",
                   reinterpret_cast<uintptr_t>(stats), "/", t.key);
  absl::MutexLock lock(&mu);
  uint64_t& last = (*last_seen)[key];
  if (t.sequence <= last) return false;
  last = t.sequence;
  return true;
}

// What rpcguard keeps per method: resolved once, on the method's first call.
struct MethodState {
  // The full method name. Read this, not ClientRpcInfo::method(), after the
  // first batch: for GenericStub callers that points into a string that may
  // be gone by the time the call ends.
  std::string name;
  ResolvedPolicy resolved;
  Stats::MethodHandle* stats = nullptr;
  // The destination's breaker, budget and A6 throttle (null when disabled or
  // not configured), under `breaker_key`.
  std::string breaker_key;
  std::shared_ptr<CircuitBreaker> breaker;
  std::shared_ptr<RetryBudget> budget;
  std::shared_ptr<RetryThrottle> throttle;
  // Two channels disagreeing about one shared breaker's options: calls fail
  // with FAILED_PRECONDITION rather than run unguarded.
  absl::Status setup_error;

  // How attempts name the method to gRPC. Registered on the channel whose
  // call first resolved this method: a registered call reuses the method's
  // path instead of building it per call, as generated stubs do. Calls
  // through any other channel (one factory may serve several) go
  // unregistered. `registered_on` proves that the channel is still the one
  // registered, not a new channel at the same address.
  std::optional<grpc::internal::RpcMethod> registered;
  const grpc::ChannelInterface* registered_channel = nullptr;
  std::weak_ptr<grpc::Channel> registered_on;
  std::optional<grpc::internal::RpcMethod> unregistered;

  // Names this method to gRPC; `channel` is the channel of the call.
  void Register(grpc::ChannelInterface* channel,
                InterceptorBatchMethods* first_batch) {
    unregistered.emplace(name.c_str(), grpc::internal::RpcMethod::NORMAL_RPC);
    // Interceptors run only on grpc::Channel; anything else stays
    // unregistered.
    auto* real = dynamic_cast<grpc::Channel*>(channel);
    if (real == nullptr) return;
    registered_on = real->weak_from_this();
    if (registered_on.expired()) return;
    registered_channel = channel;
    // The intercepted channel forwards the registration to the real one.
    registered.emplace(name.c_str(), grpc::internal::RpcMethod::NORMAL_RPC,
                       first_batch->GetInterceptedChannel());
  }

  // The RpcMethod for an attempt of a call on `channel`, which the call
  // keeps alive.
  const grpc::internal::RpcMethod& For(
      const grpc::ChannelInterface* channel) const {
    if (registered && channel == registered_channel &&
        !registered_on.expired()) {
      return *registered;
    }
    return *unregistered;
  }

  // How an attempt's outcome counts for the breaker.
  static AttemptResult BreakerResult(StatusClass c, GiveUpReason reason,
                                     grpc::StatusCode code) {
    if (reason == GiveUpReason::kCancelled ||
        (c == StatusClass::kFatal &&
         (code == grpc::StatusCode::DEADLINE_EXCEEDED ||
          code == grpc::StatusCode::CANCELLED))) {
      return AttemptResult::kIgnored;  // the caller ended it
    }
    return c == StatusClass::kRetriable ? AttemptResult::kFailure
                                        : AttemptResult::kSuccess;
  }

  // Feeds the A6 throttle; false when it refuses a retry.
  bool FeedThrottle(StatusClass c, bool server_said_stop) const {
    if (throttle == nullptr) return true;
    if (c == StatusClass::kOk) {
      throttle->RecordSuccess();
      return true;
    }
    if (c == StatusClass::kRetriable || server_said_stop) {
      return throttle->RecordFailure();
    }
    return true;
  }
};

// What every interceptor of one factory shares.
class Shared {
 public:
  explicit Shared(Options options)
      : config_(std::move(options.config)),
        clock_(options.clock != nullptr ? options.clock : Clock::Real()),
        random_(options.random != nullptr ? options.random : Random::Default()),
        refresher_(std::move(options.credential_refresher)),
        sink_(options.trace_sink != nullptr ? std::move(options.trace_sink)
                                            : DefaultSink()),
        verbosity_(options.trace_verbosity),
        stats_(options.stats != nullptr ? std::move(options.stats)
                                        : DefaultStats()),
        give_up_hook_(std::move(options.give_up_hook)),
        registry_(options.breaker_registry != nullptr
                      ? std::move(options.breaker_registry)
                      : BreakerRegistry::Default()),
        destination_(options.destination) {}

  ~Shared() { registry_->RemoveTransitionListener(listener_id_); }

  // Starts logging the transitions of this factory's breakers. Called once,
  // right after construction (it needs a weak_ptr to this).
  void Init(const std::shared_ptr<Shared>& self) {
    if (destination_.empty()) {
      // No target to share with: a key of this factory's own.
      destination_ = absl::StrCat("rpcguard-factory-", random_->Next64());
    }
    std::weak_ptr<Shared> weak = self;
    listener_id_ =
        registry_->AddTransitionListener([weak](const BreakerTransition& t) {
          if (auto shared = weak.lock()) shared->OnTransition(t);
        });
  }

  Clock* clock() const { return clock_; }
  Random* random() const { return random_; }
  const CredentialRefresher& refresher() const { return refresher_; }
  const GiveUpHook& give_up_hook() const { return give_up_hook_; }

  // The state of `method`, computed once per method: after the first call no
  // descriptor lookup or option parsing happens on the call path, only this
  // lock-free hash lookup. The reference lives as long as this object.
  // `channel` and `first_batch` belong to the call asking, and register the
  // method on the first call's channel (MethodState::Register).
  const MethodState& ForMethod(const char* method,
                               grpc::ChannelInterface* channel,
                               InterceptorBatchMethods* first_batch) const {
    return methods_.Get(method, [&](absl::string_view key) {
      auto state = std::make_unique<MethodState>();
      state->name = std::string(key);
      state->resolved = config_.Resolve(key);
      state->stats = stats_->ForMethod(key);
      state->Register(channel, first_batch);
      AttachDestination(key, state.get());
      return state;
    });
  }

  // Looks up the breaker, budget and throttle a method's calls share.
  void AttachDestination(absl::string_view method, MethodState* state) const {
    const DestinationConfig& dest = config_.destination();
    state->breaker_key = destination_;
    if (dest.key_per_service) {
      absl::string_view path = method;
      absl::ConsumePrefix(&path, "/");
      absl::StrAppend(&state->breaker_key, "/", path.substr(0, path.find('/')));
    }
    const std::string& key = state->breaker_key;
    if (dest.breaker_enabled) {
      if (dest.breaker.has_value()) {
        auto b = registry_->Get(key, *dest.breaker);
        if (b.ok()) {
          state->breaker = *std::move(b);
        } else {
          state->setup_error = b.status();
        }
      } else {
        state->breaker = registry_->Get(key);
      }
    }
    if (dest.budget_enabled) {
      if (dest.budget.has_value()) {
        auto b = registry_->GetBudget(key, *dest.budget);
        if (b.ok()) {
          state->budget = *std::move(b);
        } else if (state->setup_error.ok()) {
          state->setup_error = b.status();
        }
      } else {
        state->budget = registry_->GetBudget(key);
      }
    }
    if (dest.throttle.has_value()) {
      auto t = registry_->GetThrottle(destination_, *dest.throttle);
      if (t.ok()) {
        state->throttle = *std::move(t);
      } else if (state->setup_error.ok()) {
        state->setup_error = t.status();
      }
    }
  }

  // A breaker of the registry changed state: trace it if it is one of ours,
  // once per sink and stats object however many factories share them.
  void OnTransition(const BreakerTransition& t) const {
    if (!absl::StartsWith(t.key, destination_)) return;
    if (!FirstToSee(sink_.get(), stats_.get(), t)) return;
    TraceEvent e;
    e.kind = TraceEvent::Kind::kBreakerTransition;
    e.time = t.time;
    e.breaker_key = t.key;
    e.breaker_state = std::string(BreakerStateName(t.to));
    e.from_state = std::string(BreakerStateName(t.from));
    e.to_state = e.breaker_state;
    e.message = t.reason;
    stats_->Record(e);
    if (ShouldTrace(verbosity_, e)) sink_->Write(e);
  }

  // Counts `event`, and writes it to the trace when the verbosity asks;
  // `fill` adds the strings (method, key, message) only then, so that the
  // common untraced case copies none.
  template <typename Fill>
  void Emit(const MethodState& method, TraceEvent& event, Fill fill) const {
    stats_->Record(method.stats, event);
    if (ShouldTrace(verbosity_, event)) {
      fill(event);
      sink_->Write(event);
    }
  }

 private:
  const Config config_;
  Clock* const clock_;
  Random* const random_;
  const CredentialRefresher refresher_;
  const std::shared_ptr<TraceSink> sink_;
  const TraceVerbosity verbosity_;
  const std::shared_ptr<Stats> stats_;
  const GiveUpHook give_up_hook_;
  const std::shared_ptr<BreakerRegistry> registry_;
  std::string destination_;  // set before any call, then read-only
  BreakerRegistry::ListenerId listener_id_ = 0;
  // Read without a lock on every call (see method_cache.h).
  internal::MethodCache<MethodState> methods_;
};

// Whether the application's response object certainly is not a protobuf
// message. gRPC's interceptor API hands it over as a void*; a generated stub's
// is a MessageLite, whose first word is its vtable pointer and never null. A
// grpc::GenericStub caller's is a grpc::ByteBuffer, whose only member is a
// grpc_byte_buffer*, null while the buffer is empty (a fresh response
// buffer). Treating that as a MessageLite jumped through a null vtable.
// A non-empty ByteBuffer cannot be told apart this way: such callers still
// need MarkPassThrough.
bool CertainlyNotAMessage(const void* object) {
  const void* first_word;
  std::memcpy(&first_word, object, sizeof(first_word));
  return first_word == nullptr;
}

// Whether `batch`, the first of a call, belongs to a callback-API unary
// call: the one API whose first attempt can be the application's own call
// (CallState::RideFirstAttempt). The sync API cannot: it turns an OK status
// whose message its own call did not receive into UNIMPLEMENTED, reading a
// flag no interceptor can set; and neither API can be told from the other by
// the operations of the batch. Where they differ is where the status the
// application will read lives: gRPC 1.51's callback unary call allocates its
// operations and its completion tag, whose last member is that status, in
// the call's arena just before it starts this batch; the sync API keeps the
// status on the caller's stack, the CQ API wherever the caller put it. So
// the status ends right below the arena's next free byte exactly for
// callback calls. Probing the arena costs one 16-byte allocation from it.
// Anything else (another gRPC version, an interceptor before rpcguard that
// allocates from the arena) answers false, which only costs the hijack.
bool IsCallbackUnaryCall(InterceptorBatchMethods* batch,
                         grpc::ClientContext* context) {
#if GRPC_CPP_VERSION_MAJOR == 1 && GRPC_CPP_VERSION_MINOR == 51
  const grpc::Status* status = batch->GetRecvStatus();
  grpc_call* call = context->c_call();
  if (status == nullptr || call == nullptr) return false;
  const auto next = reinterpret_cast<uintptr_t>(grpc_call_arena_alloc(call, 1));
  const auto end = reinterpret_cast<uintptr_t>(status + 1);
  // The arena rounds every allocation up to 16 bytes.
  return end <= next && next - end < 16;
#else
  (void)batch;
  (void)context;
  return false;
#endif
}

// The serialized bytes of a ByteBuffer (for the give-up hook).
std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& slice : slices) {
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return out;
}

// The give-up reason of a call tried once without hijacking.
GiveUpReason FastPathReason(StatusClass c, grpc::StatusCode code) {
  switch (c) {
    case StatusClass::kOk:
      return GiveUpReason::kNone;
    case StatusClass::kRetriable:
      return GiveUpReason::kNotIdempotent;
    case StatusClass::kAuth:
      return GiveUpReason::kAuth;
    case StatusClass::kFatal:
      break;
  }
  if (code == grpc::StatusCode::CANCELLED) return GiveUpReason::kCancelled;
  if (code == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return GiveUpReason::kDeadline;
  }
  return GiveUpReason::kFatal;
}

// Converts between the injected clock's time and the real clock that gRPC
// timers use, by the remaining duration.
std::chrono::system_clock::time_point ToSystemTime(absl::Time t, Clock* clock) {
  const absl::Duration left = t - clock->Now();
  const auto now = std::chrono::system_clock::now();
  // A caller's deadline may lie beyond system_clock's range (gRPC takes any
  // gpr_timespec): adding it would overflow. time_point::max() is what gRPC
  // reads as "no deadline", which is what such a deadline means.
  if (left >=
      absl::FromChrono(std::chrono::system_clock::time_point::max() - now)) {
    return std::chrono::system_clock::time_point::max();
  }
  return now +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             absl::ToChronoNanoseconds(std::max(left, absl::ZeroDuration())));
}

// `t` as a gRPC deadline, never later than the caller's own `caller`
// deadline. Converting the caller's deadline to rpcguard's clock and back
// (CallerDeadline, ToSystemTime) reads two clocks one after the other; a
// thread preempted between the reads shifts the result later by as long as
// it was preempted, which must not let an attempt outlive its caller.
gpr_timespec NoLaterThanCaller(absl::Time t, Clock* clock,
                               gpr_timespec caller) {
  gpr_timespec converted;
  grpc::Timepoint2Timespec(ToSystemTime(t, clock), &converted);
  caller = gpr_convert_clock_type(caller, GPR_CLOCK_REALTIME);
  return gpr_time_cmp(converted, caller) <= 0 ? converted : caller;
}

absl::Time CallerDeadline(grpc::ClientContext* context, Clock* clock) {
  const gpr_timespec raw = context->raw_deadline();
  if (gpr_time_cmp(raw, gpr_inf_future(raw.clock_type)) == 0) {
    return absl::InfiniteFuture();
  }
  const gpr_timespec now = gpr_now(raw.clock_type);
  const gpr_timespec left = gpr_time_sub(raw, now);
  return clock->Now() + absl::Seconds(left.tv_sec) +
         absl::Nanoseconds(left.tv_nsec);
}

// One attempt: its own context and response buffer.
struct Attempt {
  // Shared so that a deferred cancel can hold it while the attempt ends; let
  // go (ReleaseContext) before the application's call is finished, because
  // it holds a reference to the application's channel: destroyed last, on a
  // gRPC callback thread, the channel can take gRPC's callback thread pool
  // down from one of its own threads (gRPC 1.51 then aborts).
  // Null for a first attempt sent on the application's own call.
  std::shared_ptr<grpc::ClientContext> context;
  grpc::ByteBuffer response;
  absl::Time deadline;
  // The breaker's admission of this attempt (none without a breaker).
  std::optional<Admission> admission;
};

// The state of one hijacked call. See the essay at the top of the file.
class CallState : public std::enable_shared_from_this<CallState> {
 public:
  // Everything needed to replay the request, captured from the first batch.
  // Filled in place (CallState::setup()) before Start: grpc::ByteBuffer
  // has no move constructor, so moving a Setup would copy the request.
  struct Setup {
    // The channel below rpcguard, and how attempts name the method on it.
    std::unique_ptr<grpc::ChannelInterface> channel;
    const grpc::internal::RpcMethod* rpc_method = nullptr;
    grpc::ByteBuffer request;
    Metadata metadata;  // the caller's, less rpcguard's own keys
    std::string idempotency_key;
    std::shared_ptr<grpc::CallCredentials> credentials;
    grpc_compression_algorithm compression = GRPC_COMPRESS_NONE;
    // The caller's deadline exactly as set: attempts never outlive it.
    gpr_timespec raw_deadline = gpr_inf_future(GPR_CLOCK_REALTIME);
  };

  // `deadline` is the caller's; `may_repeat` whether the call is safe to
  // send again.
  CallState(std::shared_ptr<const Shared> shared, const MethodState& method,
            absl::Time deadline, bool may_repeat)
      : shared_(std::move(shared)),
        method_(method),
        policy_(method.resolved.policy),
        call_id_(shared_->random()->Next64()),
        caller_deadline_(deadline),
        controller_(policy_, may_repeat, deadline, shared_->clock()) {
    if (shared_->refresher()) controller_.EnableAuthRefresh();
  }

  // What attempts replay; written only before Start() or FailBeforeStart().
  Setup& setup() { return setup_; }

  // Starts attempt 1 (or ends the call at once when it cannot start).
  void Start() { StartAttempt(); }

  // Attempt 1 is the application's own call, already admitted by the
  // breaker (`admission`): it goes to gRPC unhijacked, and rpcguard steps
  // in only when its outcome calls for a retry (OnFirstAttemptDone).
  // `response_object` is the application's response message.
  void RideFirstAttempt(std::optional<Admission> admission,
                        void* response_object) ABSL_LOCKS_EXCLUDED(mu_) {
    response_object_ = response_object;
    auto attempt = std::make_shared<Attempt>();
    attempt->admission = std::move(admission);
    internal::MutexLock lock(&mu_);
    attempt->deadline = controller_.StartAttempt();
    attempt_ = std::move(attempt);
    attempt_started_ = true;
  }

  // The application's call, carrying attempt 1 (RideFirstAttempt), has
  // received its outcome in `batch` (POST_RECV_STATUS); `channel` is the
  // call's channel. Returns false when the call is decided and `batch`,
  // filled, should proceed; true when rpcguard keeps it for the attempts
  // that follow, and proceeds it itself: the caller must not touch the
  // call again.
  bool OnFirstAttemptDone(InterceptorBatchMethods* batch,
                          const grpc::ChannelInterface* channel)
      ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<Attempt> attempt;
    {
      internal::MutexLock lock(&mu_);
      attempt = attempt_;
    }
    grpc::Status status = *batch->GetRecvStatus();
    if (status.ok() &&
        batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE) &&
        batch->GetRecvMessage() == nullptr) {
      // gRPC hides a response it could not parse (or none at all) and
      // reports OK; a hijacked call would say so, and so does this one.
      status = grpc::Status(
          grpc::StatusCode::INTERNAL,
          absl::StrCat("rpcguard: cannot parse the response of ", method_.name,
                       ": the server sent none, or one not of the "
                       "application's response type"));
    }
    if (!status.ok()) {
      // What later attempts need, only now that there may be any. Written
      // before Decide lets a canceller or an alarm run StartAttempt.
      setup_.channel = batch->GetInterceptedChannel();
      setup_.rpc_method = &method_.For(channel);
    }
    Verdict v =
        Decide(attempt, status, *batch->GetRecvTrailingMetadata(), batch);
    switch (v.next) {
      case Verdict::Next::kNothing:  // cannot happen: nothing else ends it
      case Verdict::Next::kConclude:
        Conclude(v.ready);  // no parked batch: `batch` is served below
        FillReceived(batch);
        return false;
      case Verdict::Next::kRetry:
      case Verdict::Next::kRefresh:
        Continue(v, status);
        return true;
    }
    return false;
  }

  // Ends the call before any attempt, with `status`.
  void FailBeforeStart(const grpc::Status& status, GiveUpReason reason)
      ABSL_LOCKS_EXCLUDED(mu_) {
    Batches ready;
    {
      internal::MutexLock lock(&mu_);
      ready = FinishLocked(status, reason, nullptr);
    }
    Conclude(std::move(ready));
  }

  // The caller cancelled. Safe from any thread, any number of times.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      internal::MutexLock lock(&mu_);
      if (cancelled_ || done_) return;
      cancelled_ = true;
      cancel_alarm_ = std::make_unique<grpc::Alarm>();
    }
    // Deferred: this runs inside ClientContext::TryCancel with its lock held.
    std::weak_ptr<CallState> weak = weak_from_this();
    // A deadline in the past: the alarm fires at once, on a gRPC thread.
    cancel_alarm_->Set(gpr_inf_past(GPR_CLOCK_MONOTONIC), [weak](bool) {
      if (auto self = weak.lock()) self->DoCancel();
    });
  }

  // A batch of the application's call that waits for the result.
  void Park(InterceptorBatchMethods* batch) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      internal::MutexLock lock(&mu_);
      if (!done_) {
        parked_.push_back(batch);
        return;
      }
    }
    Serve({batch});
  }

 private:
  void StartAttempt() ABSL_LOCKS_EXCLUDED(mu_) {
    auto attempt = std::make_shared<Attempt>();
    attempt->context = std::make_shared<grpc::ClientContext>();
    // Asked before every attempt, retries included, and outside mu_: a
    // transition calls listeners on this thread.
    if (method_.breaker) attempt->admission = method_.breaker->Admit();
    const bool refused = attempt->admission && !attempt->admission->allowed();
    int number = 0;
    bool ended = false;
    Batches ready;
    {
      internal::MutexLock lock(&mu_);
      if (done_) return;
      if (refused && !cancelled_) {
        ready = FinishLocked(
            grpc::Status(
                grpc::StatusCode::UNAVAILABLE,
                absl::StrCat("rpcguard: ", method_.breaker->RefusalMessage(
                                               *attempt->admission))),
            GiveUpReason::kBreakerOpen, nullptr);
        ended = true;
      } else if (cancelled_) {
        ready = FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED,
                                          "call cancelled by the caller"),
                             GiveUpReason::kCancelled, nullptr);
        ended = true;
      } else if (controller_.Remaining() <= absl::ZeroDuration()) {
        ready = FinishLocked(
            grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                         absl::StrCat("deadline passed before attempt ",
                                      controller_.attempts() + 1)),
            GiveUpReason::kDeadline, nullptr);
        ended = true;
      } else {
        attempt->deadline = controller_.StartAttempt();
        number = controller_.attempts();
        // Only first attempts that go out earn retry budget.
        if (number == 1 && method_.budget) {
          method_.budget->RecordFirstAttempt();
        }
        attempt_ = attempt;
        attempt_started_ = false;
        in_flight_ = shared_from_this();
      }
    }
    if (ended) {
      // An admitted attempt that is not sent gives its permit back.
      if (attempt->admission && !refused) {
        method_.breaker->Record(*attempt->admission, AttemptResult::kIgnored);
      }
      Conclude(std::move(ready));
      return;
    }

    // Held here too: the attempt may end, and release its context, before
    // this function is done with it.
    const std::shared_ptr<grpc::ClientContext> context = attempt->context;
    grpc::ClientContext& ctx = *context;
    if (attempt->deadline == caller_deadline_) {
      // The caller's own deadline (no per-attempt timeout before it): taken
      // as it is, with no clock read or conversion.
      ctx.set_deadline(setup_.raw_deadline);
    } else {
      ctx.set_deadline(NoLaterThanCaller(attempt->deadline, shared_->clock(),
                                         setup_.raw_deadline));
    }
    std::optional<RefreshedCredentials> refreshed;
    {
      internal::MutexLock lock(&mu_);
      refreshed = refreshed_;
    }
    if (refreshed && refreshed->credentials) {
      ctx.set_credentials(refreshed->credentials);
    } else if (setup_.credentials) {
      ctx.set_credentials(setup_.credentials);
    }
    if (setup_.compression != GRPC_COMPRESS_NONE) {
      ctx.set_compression_algorithm(setup_.compression);
    }
    if (policy_.wait_for_ready) ctx.set_wait_for_ready(*policy_.wait_for_ready);
    for (const auto& kv : setup_.metadata) {
      if (refreshed && Replaced(refreshed->metadata, kv.first)) continue;
      ctx.AddMetadata(kv.first, kv.second);
    }
    if (refreshed) {
      for (const auto& kv : refreshed->metadata) {
        ctx.AddMetadata(kv.first, kv.second);
      }
    }
    ctx.AddMetadata(HeaderString<kIdempotencyKeyHeader>(),
                    setup_.idempotency_key);
    ctx.AddMetadata(HeaderString<kAttemptHeader>(), absl::StrCat(number));

    // The callback captures only `this`, which std::function stores without
    // allocating; in_flight_ keeps this object alive until it runs.
    grpc::internal::CallbackUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        setup_.channel.get(), *setup_.rpc_method, &ctx, &setup_.request,
        &attempt->response,
        [this](grpc::Status status) { OnAttemptDone(std::move(status)); });

    bool cancel_now;
    {
      internal::MutexLock lock(&mu_);
      attempt_started_ = true;
      cancel_now = cancelled_ && attempt_ == attempt;
    }
    // A cancel that came while the attempt was being started found it not
    // yet startable; cancel it now.
    if (cancel_now) ctx.TryCancel();
  }

  void OnAttemptDone(grpc::Status status) ABSL_LOCKS_EXCLUDED(mu_) {
    // Declared first, so destroyed last: this object may be otherwise
    // unreferenced once the application's call has been finished below.
    std::shared_ptr<CallState> self;
    std::shared_ptr<Attempt> attempt;
    {
      internal::MutexLock lock(&mu_);
      self = std::move(in_flight_);
      attempt = attempt_;
    }
    Verdict v = Decide(attempt, status,
                       attempt->context->GetServerTrailingMetadata(), nullptr);
    switch (v.next) {
      case Verdict::Next::kNothing:
        return;
      case Verdict::Next::kConclude:
        Conclude(v.ready);
        return;
      case Verdict::Next::kRetry:
      case Verdict::Next::kRefresh:
        Continue(v, status);
        return;
    }
  }

  // What Decide concluded, and what its caller does next.
  struct Verdict {
    enum class Next {
      kNothing,   // the call had already ended
      kConclude,  // the call is decided: Conclude(ready)
      kRetry,     // Continue: a backoff, then the next attempt
      kRefresh,   // Continue: a credential refresh, then the next attempt
    };
    Next next = Next::kNothing;
    Batches ready;
    absl::Time backoff_until;
    absl::Time deadline;  // kRefresh: the call's
    TraceEvent event;     // kRetry, kRefresh: the retry decision's
  };

  // Decides what follows `attempt`, which ended with `status` and
  // `trailers`: the breaker, the controller, the throttle and the budget
  // have their say. `hold` (may be null) is a batch of the application's
  // call that waits for the outcome; when the call goes on it is parked in
  // the same critical section, before anything can end the call.
  Verdict Decide(
      const std::shared_ptr<Attempt>& attempt, const grpc::Status& status,
      const std::multimap<grpc::string_ref, grpc::string_ref>& trailers,
      InterceptorBatchMethods* hold) ABSL_LOCKS_EXCLUDED(mu_) {
    Pushback pushback;
    if (!status.ok()) {
      auto it = trailers.find(kPushbackTrailer);
      if (it != trailers.end()) {
        pushback = ParsePushback(
            absl::string_view(it->second.data(), it->second.size()));
      }
      pushback.min_delay = ParseRetryInfo(status.error_details());
    }

    Verdict v;
    // The breaker learns of this attempt before the decision, so that a
    // retry decided below sees a breaker this very failure opened. Outside
    // mu_: a transition calls listeners on this thread.
    if (attempt->admission) {
      AttemptOutcome outcome;
      outcome.code = status.error_code();
      absl::Time call_deadline;
      {
        internal::MutexLock lock(&mu_);
        outcome.caller_cancelled = cancelled_;
        call_deadline = controller_.deadline();
      }
      outcome.caller_deadline_expired =
          shared_->clock()->Now() >= call_deadline;
      outcome.per_attempt_timeout_expired =
          outcome.code == grpc::StatusCode::DEADLINE_EXCEEDED &&
          attempt->deadline < call_deadline;
      method_.breaker->Record(
          *attempt->admission,
          AttemptResultFor(policy_.MakeClassifier().Classify(outcome),
                           outcome));
    }
    internal::MutexLock lock(&mu_);
    attempt_.reset();
    if (done_) return v;
    RandomBitGen gen(shared_->random());
    Decision d = controller_.OnAttemptEnd(status.error_code(), pushback,
                                          cancelled_, gen);
    // The A6 throttle sees every attempt; the budget only retries, and
    // only those an open breaker would not refuse anyway (a refused call
    // spends no budget).
    const bool throttle_ok = method_.FeedThrottle(
        d.status_class, pushback.kind == Pushback::Kind::kStop);
    if (d.action == Decision::Action::kRetry && method_.breaker &&
        (method_.breaker->state() == BreakerState::kOpen ||
         method_.breaker->state() == BreakerState::kForcedOpen)) {
      d.action = Decision::Action::kGiveUp;
      d.reason = GiveUpReason::kBreakerOpen;
      d.delay = absl::ZeroDuration();
    } else if (d.action == Decision::Action::kRetry &&
               (!throttle_ok ||
                (method_.budget && !method_.budget->TryAcquireRetry()))) {
      d.action = Decision::Action::kGiveUp;
      d.reason = GiveUpReason::kBudgetExhausted;
      d.delay = absl::ZeroDuration();
    }
    if (d.action == Decision::Action::kRefreshAuth) {
      v.next = Verdict::Next::kRefresh;
      refreshing_ = true;
      last_status_ = status;
      last_attempt_ = attempt;
      v.deadline = controller_.deadline();
      if (v.deadline != absl::InfiniteFuture()) {
        refresh_alarm_ = std::make_unique<grpc::Alarm>();
      }
    } else if (d.action == Decision::Action::kRetry) {
      v.next = Verdict::Next::kRetry;
      v.backoff_until = shared_->clock()->Now() + d.delay;
      backoff_alarm_ = std::make_unique<grpc::Alarm>();
      backoff_armed_ = false;
    } else {
      grpc::Status final = status;
      if (cancelled_ && !status.ok()) {
        final = grpc::Status(grpc::StatusCode::CANCELLED,
                             "call cancelled by the caller");
      }
      v.next = Verdict::Next::kConclude;
      v.ready = FinishLocked(final, d.reason, attempt.get(),
                             TraceEvent::Kind::kAttempt, d.status_class);
      return v;
    }
    if (hold != nullptr) parked_.push_back(hold);
    v.event.attempt = controller_.attempts();
    v.event.status_class = d.status_class;
    v.event.backoff = d.delay;
    v.event.deadline_left = controller_.Remaining();
    return v;
  }

  // Carries out a retry decision of Decide (kRetry or kRefresh) for an
  // attempt that ended with `status`.
  void Continue(Verdict& v, const grpc::Status& status)
      ABSL_LOCKS_EXCLUDED(mu_) {
    TraceEvent& event = v.event;
    event.time = shared_->clock()->Now();
    event.call_id = call_id_;
    event.code = status.error_code();
    event.decision = TraceDecision::kRetry;
    shared_->Emit(method_, event, [&](TraceEvent& e) {
      e.method = method_.name;
      e.idempotency_key = setup_.idempotency_key;
      e.message = status.error_message();
      FillBreaker(e);
    });
    if (v.next == Verdict::Next::kRefresh) {
      BeginRefresh(v.deadline);
      return;
    }

    std::weak_ptr<CallState> weak = weak_from_this();
    grpc::Alarm* alarm = backoff_alarm_.get();
    alarm->Set(ToSystemTime(v.backoff_until, shared_->clock()), [weak](bool) {
      if (auto self = weak.lock()) self->StartAttempt();
    });
    bool cancel_now;
    {
      internal::MutexLock lock(&mu_);
      backoff_armed_ = true;
      cancel_now = cancelled_;
    }
    // A cancel during the backoff: end it now rather than when it expires.
    if (cancel_now) alarm->Cancel();
  }

  // Asks the refresher for credentials; the call's deadline still holds.
  void BeginRefresh(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_) {
    std::weak_ptr<CallState> weak = weak_from_this();
    if (refresh_alarm_) {
      refresh_alarm_->Set(
          NoLaterThanCaller(deadline, shared_->clock(), setup_.raw_deadline),
          [weak](bool fired) {
            if (!fired) return;
            if (auto self = weak.lock())
              self->EndRefresh(absl::DeadlineExceededError(""));
          });
    }
    // Held weakly: a refresher that answers after the call ended finds
    // nothing to do.
    shared_->refresher()(method_.name,
                         [weak](absl::StatusOr<RefreshedCredentials> result) {
                           if (auto self = weak.lock())
                             self->EndRefresh(std::move(result));
                         });
  }

  // The refresh ended: with credentials (retry), an error, the deadline
  // (kDeadlineExceeded with an empty message, from the alarm) or a cancel.
  void EndRefresh(absl::StatusOr<RefreshedCredentials> result)
      ABSL_LOCKS_EXCLUDED(mu_) {
    Batches ready;
    bool start = false;
    {
      internal::MutexLock lock(&mu_);
      if (done_ || !refreshing_) return;
      refreshing_ = false;
      const bool timed_out =
          result.status().code() == absl::StatusCode::kDeadlineExceeded &&
          result.status().message().empty();
      if (cancelled_) {
        ready = FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED,
                                          "call cancelled by the caller"),
                             GiveUpReason::kCancelled, nullptr);
      } else if (timed_out) {
        ready = FinishLocked(last_status_, GiveUpReason::kDeadline,
                             last_attempt_.get());
      } else if (!result.ok()) {
        ready = FinishLocked(
            grpc::Status(last_status_.error_code(),
                         absl::StrCat(last_status_.error_message(),
                                      " (rpcguard: credential refresh failed: ",
                                      result.status().message(), ")"),
                         last_status_.error_details()),
            GiveUpReason::kAuth, last_attempt_.get());
      } else {
        refreshed_ = *std::move(result);
        start = true;
      }
      last_attempt_.reset();
    }
    if (refresh_alarm_) refresh_alarm_->Cancel();
    if (start) {
      StartAttempt();
    } else {
      Conclude(std::move(ready));
    }
  }

  void FillBreaker(TraceEvent& e) const {
    if (method_.breaker == nullptr) return;
    e.breaker_key = method_.breaker_key;
    e.breaker_state = std::string(BreakerStateName(method_.breaker->state()));
  }

  static bool Replaced(const Metadata& replacements, const std::string& key) {
    for (const auto& kv : replacements) {
      if (kv.first == key) return true;
    }
    return false;
  }

  // The deferred half of Cancel(): stops whatever is running. Its completion
  // (CANCELLED attempt, or cancelled alarm) then ends the call.
  void DoCancel() ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<grpc::ClientContext> attempt;
    grpc::Alarm* alarm = nullptr;
    bool end_refresh = false;
    {
      internal::MutexLock lock(&mu_);
      if (done_) return;
      // The refresher cannot be stopped; the call ends without it.
      end_refresh = refreshing_;
      if (attempt_ != nullptr && attempt_started_) {
        attempt = attempt_->context;
      }
      if (attempt_ == nullptr && backoff_alarm_ && backoff_armed_) {
        alarm = backoff_alarm_.get();
      }
    }
    if (end_refresh) {
      EndRefresh(absl::CancelledError());
      return;
    }
    if (attempt) attempt->TryCancel();
    // The alarm's callback calls StartAttempt, which ends the call as
    // cancelled without starting an attempt.
    if (alarm) alarm->Cancel();
  }

  // Records the final outcome; returns the parked batches to serve.
  // `kind` and `status_class` describe the call's terminal trace event: the
  // attempt that ended it (kAttempt), or the attempt it did not send
  // (kFailFast).
  Batches FinishLocked(const grpc::Status& status, GiveUpReason reason,
                       Attempt* last,
                       TraceEvent::Kind kind = TraceEvent::Kind::kFailFast,
                       StatusClass status_class = StatusClass::kFatal)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    done_ = true;
    const int attempts = controller_.attempts();
    terminal_.kind = kind;
    terminal_.attempt =
        kind == TraceEvent::Kind::kAttempt ? attempts : attempts + 1;
    terminal_.code = status.error_code();
    terminal_.status_class = status.ok() ? StatusClass::kOk : status_class;
    terminal_.decision =
        status.ok() ? TraceDecision::kDone : TraceDecision::kGiveUp;
    terminal_.reason = status.ok()                     ? GiveUpReason::kNone
                       : reason == GiveUpReason::kNone ? GiveUpReason::kFatal
                                                       : reason;
    terminal_.deadline_left = controller_.Remaining();
    terminal_.message = status.error_message();
    // A success carries no message; its attempts are in the trailer.
    final_status_ = status.ok()
                        ? status
                        : grpc::Status(status.error_code(),
                                       AnnotateMessage(status.error_message(),
                                                       attempts, reason),
                                       status.error_details());
    attempts_text_ = absl::StrCat(attempts);
    // The application's own call carried the final attempt: its response
    // and metadata are already where the application reads them.
    final_from_app_call_ = last != nullptr && last->context == nullptr;
    if (last != nullptr && last->context != nullptr) {
      response_.Swap(&last->response);
      for (const auto& kv : last->context->GetServerInitialMetadata()) {
        initial_metadata_.emplace_back(
            std::string(kv.first.data(), kv.first.size()),
            std::string(kv.second.data(), kv.second.size()));
      }
      for (const auto& kv : last->context->GetServerTrailingMetadata()) {
        trailing_metadata_.emplace_back(
            std::string(kv.first.data(), kv.first.size()),
            std::string(kv.second.data(), kv.second.size()));
      }
      // Everything needed is copied: let the attempt's context (and its
      // channel reference) go now, while the application's call still holds
      // the channel (see Attempt::context).
      last->context.reset();
    }
    Batches ready;
    ready.swap(parked_);
    return ready;
  }

  // Ends the call: its terminal trace event, the give-up hook, then the
  // application's batches. Runs once, after FinishLocked, without mu_.
  void Conclude(Batches ready) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // terminal_ is written once by FinishLocked, before done_; only this
    // thread reads it after.
    TraceEvent& e = terminal_;
    e.time = shared_->clock()->Now();
    e.call_id = call_id_;
    shared_->Emit(method_, e, [&](TraceEvent& event) {
      event.method = method_.name;
      event.idempotency_key = setup_.idempotency_key;
      FillBreaker(event);
    });
    if (e.decision == TraceDecision::kGiveUp && shared_->give_up_hook()) {
      GiveUpInfo info;
      info.call_id = call_id_;
      info.method = method_.name;
      info.code = e.code;
      info.message = e.message;
      info.reason = e.reason;
      info.attempts =
          e.kind == TraceEvent::Kind::kAttempt ? e.attempt : e.attempt - 1;
      info.idempotency_key = setup_.idempotency_key;
      info.request = Bytes(setup_.request);
      shared_->give_up_hook()(info);
    }
    Serve(ready);
  }

  // Fills and proceeds batches once the call is decided. Batches without the
  // status go first: the status completes the call for the application.
  void Serve(const Batches& batches) ABSL_LOCKS_EXCLUDED(mu_) {
    for (InterceptorBatchMethods* b : batches) Fill(b);
    InterceptorBatchMethods* status_batch = nullptr;
    for (InterceptorBatchMethods* b : batches) {
      if (b->QueryInterceptionHookPoint(
              InterceptionHookPoints::PRE_RECV_STATUS)) {
        status_batch = b;  // a unary call has one
      } else {
        b->Proceed();
      }
    }
    if (status_batch != nullptr) status_batch->Proceed();
  }

  // Parses the final response into the application's response object; on a
  // failure (the call's or the parse's) leaves it alone and returns false.
  bool FillMessage(void* object) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (!final_status_.ok()) return false;
    if (CertainlyNotAMessage(object)) {
      final_status_ = grpc::Status(
          grpc::StatusCode::INTERNAL,
          absl::StrCat("rpcguard: the response object of ", method_.name,
                       " is not a protobuf message (a grpc::GenericStub "
                       "call with grpc::ByteBuffer?); call "
                       "rpcguard::MarkPassThrough(&context) before such "
                       "calls"));
      return false;
    }
    // Generated unary stubs in gRPC 1.51 receive into a MessageLite;
    // ByteBuffer callers must opt out (MarkPassThrough). A unary call
    // receives one message: parsing may consume response_.
    grpc::Status parsed =
        grpc::SerializationTraits<grpc::protobuf::MessageLite>::Deserialize(
            &response_, static_cast<grpc::protobuf::MessageLite*>(object));
    if (!parsed.ok()) {
      final_status_ = grpc::Status(
          grpc::StatusCode::INTERNAL,
          absl::StrCat("rpcguard: cannot parse the response of ", method_.name,
                       ": ", parsed.error_message()));
      return false;
    }
    return true;
  }

  // Fills the receive batch of an application's call that carried the
  // first attempt itself (RideFirstAttempt), after gRPC received its
  // outcome: the final attempt's metadata, response and status replace the
  // first attempt's, unless the first attempt is the final one.
  void FillReceived(InterceptorBatchMethods* b) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    auto* trailing = b->GetRecvTrailingMetadata();
    if (!final_from_app_call_) {
      if (b->QueryInterceptionHookPoint(
              InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
        auto* map = b->GetRecvInitialMetadata();
        map->clear();
        for (const auto& kv : initial_metadata_) {
          map->emplace(grpc::string_ref(kv.first), grpc::string_ref(kv.second));
        }
      }
      // The batch's own message pointer is null after a failed attempt:
      // the object was captured with the first batch.
      FillMessage(response_object_);
      trailing->clear();
      for (const auto& kv : trailing_metadata_) {
        trailing->emplace(grpc::string_ref(kv.first),
                          grpc::string_ref(kv.second));
      }
    }
    *b->GetRecvStatus() = final_status_;
    trailing->emplace(grpc::string_ref(kAttemptsTrailer),
                      grpc::string_ref(attempts_text_));
  }

  // The final_* fields are written once under mu_ before done_ is set, and
  // only read after; Fill runs after that, so it reads them without the lock.
  void Fill(InterceptorBatchMethods* b) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (b->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_STATUS)) {
      FillReceived(b);
      return;
    }
    if (b->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_RECV_INITIAL_METADATA)) {
      auto* map = b->GetRecvInitialMetadata();
      for (const auto& kv : initial_metadata_) {
        map->emplace(grpc::string_ref(kv.first), grpc::string_ref(kv.second));
      }
    }
    if (b->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_RECV_MESSAGE)) {
      if (!FillMessage(b->GetRecvMessage())) b->FailHijackedRecvMessage();
    }
    if (b->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_RECV_STATUS)) {
      *b->GetRecvStatus() = final_status_;
      auto* map = b->GetRecvTrailingMetadata();
      for (const auto& kv : trailing_metadata_) {
        map->emplace(grpc::string_ref(kv.first), grpc::string_ref(kv.second));
      }
      map->emplace(grpc::string_ref(kAttemptsTrailer),
                   grpc::string_ref(attempts_text_));
    }
  }

  const std::shared_ptr<const Shared> shared_;
  const MethodState& method_;
  const MethodPolicy& policy_;
  Setup setup_;  // read-only once the call has started
  const uint64_t call_id_;
  // The caller's deadline, before any methodConfig `timeout` shortens it.
  const absl::Time caller_deadline_;

  internal::Mutex mu_;
  RetryController controller_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<Attempt> attempt_ ABSL_GUARDED_BY(mu_);
  // This object, while an attempt runs: the attempt's callback holds only a
  // raw pointer.
  std::shared_ptr<CallState> in_flight_ ABSL_GUARDED_BY(mu_);
  bool attempt_started_ ABSL_GUARDED_BY(mu_) = false;
  // Set under mu_, then used without it by the one thread that armed it.
  std::unique_ptr<grpc::Alarm> backoff_alarm_;
  bool backoff_armed_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<grpc::Alarm> cancel_alarm_;
  // The one credential refresh of the call, while it runs.
  bool refreshing_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status last_status_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Attempt> last_attempt_ ABSL_GUARDED_BY(mu_);
  std::optional<RefreshedCredentials> refreshed_ ABSL_GUARDED_BY(mu_);
  // Set once, before the refresher is called; ends a refresh at the deadline.
  std::unique_ptr<grpc::Alarm> refresh_alarm_;
  Batches parked_ ABSL_GUARDED_BY(mu_);

  // The application's response object, for a call whose first attempt is
  // its own (RideFirstAttempt).
  void* response_object_ = nullptr;
  // The outcome, written once by FinishLocked. The application's metadata
  // maps point into these strings, so they live as long as the call.
  bool final_from_app_call_ = false;
  grpc::Status final_status_;
  grpc::ByteBuffer response_;
  Metadata initial_metadata_;
  Metadata trailing_metadata_;
  std::string attempts_text_;
  TraceEvent terminal_;
};

class RetryInterceptor final : public grpc::experimental::Interceptor {
 public:
  RetryInterceptor(ClientRpcInfo* info, std::shared_ptr<const Shared> shared)
      : info_(info), shared_(std::move(shared)) {}

  void Intercept(InterceptorBatchMethods* batch) override {
    if (batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_CANCEL)) {
      OnCancel();
      return;  // gRPC continues a cancel batch by itself.
    }
    if (info_->type() != ClientRpcInfo::Type::UNARY) {
      batch->Proceed();
      return;
    }
    if (batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      OnFirstBatch(batch);
      return;  // OnFirstBatch may hijack: `this` may be gone.
    }
    if (hijacked_ && (batch->QueryInterceptionHookPoint(
                          InterceptionHookPoints::PRE_RECV_INITIAL_METADATA) ||
                      batch->QueryInterceptionHookPoint(
                          InterceptionHookPoints::PRE_RECV_MESSAGE) ||
                      batch->QueryInterceptionHookPoint(
                          InterceptionHookPoints::PRE_RECV_STATUS))) {
      call_for_batches_->Park(batch);
      return;
    }
    if (riding_ && batch->QueryInterceptionHookPoint(
                       InterceptionHookPoints::POST_RECV_STATUS)) {
      // A success with its message ends the call as on the fast path;
      // anything else may need a retry.
      if (!batch->GetRecvStatus()->ok() ||
          (batch->QueryInterceptionHookPoint(
               InterceptionHookPoints::POST_RECV_MESSAGE) &&
           batch->GetRecvMessage() == nullptr)) {
        RideFailed(batch);  // may end with `this` gone
        return;
      }
    }
    if (fast_path_method_ != nullptr &&
        batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_STATUS)) {
      OnFastPathStatus(batch);
    }
    batch->Proceed();
  }

 private:
  void OnCancel() ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<CallState> call;
    {
      internal::MutexLock lock(&mu_);
      cancelled_ = true;
      call = call_;
    }
    if (call) call->Cancel();
  }

  // A call tried once without hijacking has ended: report it like any other.
  void OnFastPathStatus(InterceptorBatchMethods* batch) {
    static const grpc::string_ref kOne("1");
    batch->GetRecvTrailingMetadata()->emplace(
        grpc::string_ref(kAttemptsTrailer), kOne);
    grpc::Status* status = batch->GetRecvStatus();
    const MethodState& method = *fast_path_method_;
    TraceEvent event;
    event.kind = TraceEvent::Kind::kAttempt;
    event.attempt = 1;
    event.code = status->error_code();
    if (!status->ok()) {
      AttemptOutcome outcome;
      outcome.code = status->error_code();
      event.status_class =
          method.resolved.policy.MakeClassifier().Classify(outcome);
      event.decision = TraceDecision::kGiveUp;
      event.reason = FastPathReason(event.status_class, event.code);
    }
    const std::string original_message =
        status->ok() ? std::string() : status->error_message();
    if (event.reason == GiveUpReason::kNotIdempotent) {
      // Say why a transient failure was not retried.
      *status = grpc::Status(status->error_code(),
                             AnnotateMessage(status->error_message(), 1,
                                             GiveUpReason::kNotIdempotent),
                             status->error_details());
    }
    if (fast_path_admission_) {
      method.breaker->Record(*fast_path_admission_,
                             MethodState::BreakerResult(
                                 event.status_class, event.reason, event.code));
    }
    method.FeedThrottle(event.status_class, false);
    uint64_t call_id = 0;
    shared_->Emit(method, event, [&](TraceEvent& e) {
      e.time = shared_->clock()->Now();
      call_id = e.call_id = shared_->random()->Next64();
      e.method = method.name;
      e.idempotency_key = fast_path_key_;
      e.message = original_message;
      e.deadline_left =
          CallerDeadline(info_->client_context(), shared_->clock()) - e.time;
      if (method.breaker) {
        e.breaker_key = method.breaker_key;
        e.breaker_state =
            std::string(BreakerStateName(method.breaker->state()));
      }
    });
    if (event.decision == TraceDecision::kGiveUp && shared_->give_up_hook()) {
      GiveUpInfo info;
      info.call_id = call_id != 0 ? call_id : shared_->random()->Next64();
      info.method = method.name;
      info.code = event.code;
      info.message = original_message;
      info.reason = event.reason;
      info.attempts = 1;
      info.idempotency_key = fast_path_key_;
      info.request = Bytes(fast_path_request_);
      shared_->give_up_hook()(info);
    }
  }

  // A CallState for this call, with what the application's context says.
  std::shared_ptr<CallState> NewCallState(const MethodState& method,
                                          bool may_repeat) {
    grpc::ClientContext* app = info_->client_context();
    auto call = std::make_shared<CallState>(
        shared_, method, CallerDeadline(app, shared_->clock()), may_repeat);
    CallState::Setup& setup = call->setup();
    setup.credentials = app->credentials();
    setup.compression = app->compression_algorithm();
    setup.raw_deadline = app->raw_deadline();
    return call;
  }

  // Attempt 1 of a riding call (the application's own call) ended without a
  // clean success in `batch`: from here rpcguard owns the outcome.
  void RideFailed(InterceptorBatchMethods* batch) {
    std::shared_ptr<CallState> call = NewCallState(*fast_path_method_, true);
    CallState::Setup& setup = call->setup();
    setup.idempotency_key = std::move(fast_path_key_);
    setup.metadata = std::move(ride_metadata_);
    setup.request.Swap(&ride_request_);
    call->RideFirstAttempt(std::move(fast_path_admission_), ride_response_);
    fast_path_admission_.reset();
    bool cancelled;
    {
      internal::MutexLock lock(&mu_);
      call_ = call;
      cancelled = cancelled_;
    }
    // A cancel that came before call_ was set: the call must not retry.
    if (cancelled) call->Cancel();
    // Kept for a retry: rpcguard proceeds it, and `this` may be gone.
    if (call->OnFirstAttemptDone(batch, info_->channel())) return;
    batch->Proceed();
  }

  void OnFirstBatch(InterceptorBatchMethods* batch) {
    auto* md = batch->GetSendInitialMetadata();
    // Most calls carry no metadata of their own: skip the lookups.
    const bool has_metadata = !md->empty();
    if (has_metadata && md->erase(HeaderString<kPassThroughHeader>()) > 0) {
      batch->Proceed();
      return;
    }
    const MethodState& method =
        shared_->ForMethod(info_->method(), info_->channel(), batch);
    const ResolvedPolicy& resolved = method.resolved;
    const MethodPolicy& policy = resolved.policy;

    // rpcguard owns the attempt header: a caller's value would lie.
    if (has_metadata) md->erase(HeaderString<kAttemptHeader>());
    std::string key;
    const size_t keys =
        has_metadata ? md->count(HeaderString<kIdempotencyKeyHeader>()) : 0;
    // A call rpcguard refuses before sending anything.
    grpc::Status reject;
    if (!resolved.error.ok()) {
      reject = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            absl::StrCat("rpcguard: bad retry declaration: ",
                                         resolved.error.message()));
    } else if (!method.setup_error.ok()) {
      reject = grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("rpcguard: ", method.setup_error.message()));
    } else if (keys > 0) {
      key = md->find(HeaderString<kIdempotencyKeyHeader>())->second;
      if (keys > 1) {
        reject = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "rpcguard: more than one idempotency-key "
                              "metadata value on the call");
      } else if (key.empty() || key.size() > kMaxIdempotencyKeyLength) {
        reject =
            grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                         absl::StrCat("rpcguard: idempotency-key must be 1 to ",
                                      kMaxIdempotencyKeyLength,
                                      " characters, got ", key.size()));
      } else if (!std::all_of(key.begin(), key.end(),
                              [](char c) { return c >= 0x20 && c <= 0x7e; })) {
        // gRPC aborts the process (GPR_ASSERT on GRPC_CALL_ERROR_INVALID_
        // METADATA) when an attempt carries such a value.
        reject = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "rpcguard: idempotency-key must be printable "
                              "ASCII (0x20-0x7E)");
      }
    }
    // A caller's own key says the server deduplicates this call.
    const Idempotency idempotency =
        policy.idempotency == Idempotency::kUnknown && keys == 1 && reject.ok()
            ? Idempotency::kKeyed
            : policy.idempotency;
    const bool may_repeat =
        MayRepeat(idempotency) && policy.retry.max_attempts > 1;
    bool needs_hijack = !reject.ok() ||
                        policy.timeout != absl::InfiniteDuration() ||
                        policy.wait_for_ready.has_value();
    // A call that may be retried needs rpcguard to own its outcome. Through
    // the callback API that can wait until attempt 1, the application's own
    // call, has failed (RideFirstAttempt); through the others it means
    // hijacking from the start.
    bool ride = false;
    if (!needs_hijack && may_repeat &&
        policy.per_attempt_timeout == absl::InfiniteDuration()) {
      // (An attempt's own deadline cannot be put on the application's call.)
      ride = IsCallbackUnaryCall(batch, info_->client_context()) &&
             !CertainlyNotAMessage(batch->GetRecvMessage());
    }
    needs_hijack = needs_hijack || (may_repeat && !ride);

    // A call sent unhijacked asks the breaker here; a hijacked call asks
    // before each attempt.
    GiveUpReason reject_reason = GiveUpReason::kNone;
    if (!needs_hijack && method.breaker) {
      fast_path_admission_ = method.breaker->Admit();
      if (!fast_path_admission_->allowed()) {
        reject = grpc::Status(
            grpc::StatusCode::UNAVAILABLE,
            absl::StrCat("rpcguard: ", method.breaker->RefusalMessage(
                                           *fast_path_admission_)));
        reject_reason = GiveUpReason::kBreakerOpen;
        fast_path_admission_.reset();
        needs_hijack = true;
        ride = false;
      }
    }

    if (!needs_hijack) {
      if (method.budget) method.budget->RecordFirstAttempt();
      // Sent as without rpcguard, plus the metadata.
      fast_path_key_ =
          keys > 0 ? std::move(key) : NewUuidV4(*shared_->random());
      fast_path_method_ = &method;
      if (ride) {
        // What a retry would need, kept cheaply: the call's state is built
        // only if attempt 1 fails (RideFailed). Copied: the application's
        // call sends the request too.
        ride_request_ = *batch->GetSerializedSendMessage();
        ride_response_ = batch->GetRecvMessage();
        if (has_metadata) {
          md->erase(HeaderString<kIdempotencyKeyHeader>());
          ride_metadata_.assign(md->begin(), md->end());
        }
        riding_ = true;
      } else if (shared_->give_up_hook()) {
        fast_path_request_ = *batch->GetSerializedSendMessage();
      }
      if (ride || keys == 0) {
        md->emplace(HeaderString<kIdempotencyKeyHeader>(), fast_path_key_);
      }
      md->emplace(HeaderString<kAttemptHeader>(), "1");
      batch->Proceed();
      return;
    }

    auto call = NewCallState(method, may_repeat);
    call->setup().idempotency_key =
        keys > 0 ? std::move(key) : NewUuidV4(*shared_->random());
    if (has_metadata) {
      md->erase(HeaderString<kIdempotencyKeyHeader>());
      call->setup().metadata.assign(md->begin(), md->end());
    }
    CallState::Setup& setup = call->setup();
    setup.channel = batch->GetInterceptedChannel();
    setup.rpc_method = &method.For(info_->channel());
    // Taken, not copied: a hijacked call never sends its own message.
    setup.request.Swap(batch->GetSerializedSendMessage());
    bool cancelled;
    {
      internal::MutexLock lock(&mu_);
      call_ = call;
      cancelled = cancelled_;
    }
    call_for_batches_ = call.get();
    hijacked_ = true;
    if (!reject.ok()) {
      call->FailBeforeStart(reject, reject_reason);
    } else if (cancelled) {
      call->FailBeforeStart(grpc::Status(grpc::StatusCode::CANCELLED,
                                         "call cancelled before it started"),
                            GiveUpReason::kCancelled);
    } else {
      call->Start();
    }
    // Re-enters Intercept() with this batch's receive hooks, which park.
    batch->Hijack();
  }

  ClientRpcInfo* const info_;
  const std::shared_ptr<const Shared> shared_;
  // Written by the first batch before Hijack()/Proceed(); later batches of
  // the same call are ordered after it by gRPC.
  bool hijacked_ = false;
  // Set when attempt 1 is the application's own call and may be followed
  // by others (CallState::RideFirstAttempt); with what those would need.
  bool riding_ = false;
  grpc::ByteBuffer ride_request_;
  void* ride_response_ = nullptr;
  Metadata ride_metadata_;  // the caller's, less rpcguard's own keys
  // Set when the call is tried once without hijacking.
  const MethodState* fast_path_method_ = nullptr;
  std::string fast_path_key_;
  std::optional<Admission> fast_path_admission_;
  grpc::ByteBuffer fast_path_request_;  // only with a give-up hook
  CallState* call_for_batches_ = nullptr;

  // A cancel may come on any thread, before or during the first batch.
  internal::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<CallState> call_ ABSL_GUARDED_BY(mu_);
};

class RetryInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit RetryInterceptorFactory(std::shared_ptr<const Shared> shared)
      : shared_(std::move(shared)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      ClientRpcInfo* info) override {
    return new RetryInterceptor(info, shared_);
  }

 private:
  // Shared with every interceptor, so calls in flight outlive the factory.
  std::shared_ptr<const Shared> shared_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
MakeInterceptorFactory(Options options) {
  auto shared = std::make_shared<Shared>(std::move(options));
  shared->Init(shared);
  return std::make_unique<RetryInterceptorFactory>(std::move(shared));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(
    const std::string& target,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    Options options, grpc::ChannelArguments args) {
  // Channels to one target share their breaker and budget.
  if (options.destination.empty()) options.destination = target;
  const grpc_channel_args c_args = args.c_channel_args();
  for (size_t i = 0; i < c_args.num_args; ++i) {
    const grpc_arg& arg = c_args.args[i];
    if (!options.allow_grpc_retry_policy && arg.type == GRPC_ARG_STRING &&
        absl::string_view(arg.key) == GRPC_ARG_SERVICE_CONFIG &&
        absl::string_view(arg.value.string).find("\"retryPolicy\"") !=
            absl::string_view::npos) {
      return absl::InvalidArgumentError(
          "the channel's service config has a retryPolicy: gRPC's built-in "
          "retries would run inside every rpcguard attempt and multiply "
          "attempts; move the policy into rpcguard's Config instead, or set "
          "Options::allow_grpc_retry_policy");
    }
  }
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      factories;
  factories.push_back(MakeInterceptorFactory(std::move(options)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, credentials, args, std::move(factories));
}

std::shared_ptr<Stats> DefaultStats() {
  static const std::shared_ptr<Stats>* const stats =
      new std::shared_ptr<Stats>(std::make_shared<Stats>());
  return *stats;
}

void MarkPassThrough(grpc::ClientContext* context) {
  context->AddMetadata(kPassThroughHeader, "1");
}

}  // namespace rpcguard
