// tickwire from C++: a header-only RAII wrapper over tickwire.h. See
// docs/cpp.md.
//
// C++17 or later (C++20 makes tw::bytes a std::span). Link libtickwire.a
// and -lelf -lz -lutil -lrt -lpthread -lm -ldl, as for C.
//
// - Handles (tw::Context, tw::Publication, tw::Subscription, tw::Client)
//   are move-only; a destructor closes its handle and ignores what closing
//   says, close() reports it. A moved-from or closed handle is inert: a
//   call on it throws tw::Error with TW_ERR_CLOSED, its destructor does
//   nothing.
// - Setup and misuse throw tw::Error (the tw_status and tw_last_error()).
//   What the hot path must expect (back-pressure, not connected yet, no
//   message within the timeout) is a return value: offer() and publish()
//   return false, receive() an empty optional.
// - poll() takes any callable, invoked with a tw::Event (a view of the
//   tw_event: string_view and tw::bytes accessors, valid during the call
//   only) or, if it takes one, with the const tw_event&.
// - Inline, no allocation on publish or poll.

#ifndef TICKWIRE_HPP
#define TICKWIRE_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#if __cplusplus >= 202002L && defined(__has_include)
#if __has_include(<span>)
#include <span>
#define TICKWIRE_HPP_SPAN 1
#endif
#endif

#include "tickwire.h"

#if defined(__GNUC__)
#define TICKWIRE_HPP_COLD __attribute__((cold, noinline))
#else
#define TICKWIRE_HPP_COLD
#endif

namespace tw {

#ifdef TICKWIRE_HPP_SPAN
/// Read-only bytes: a payload, headers, a buffer to publish.
using bytes = std::span<const std::uint8_t>;
/// Writable bytes: a buffer to receive into.
using mutable_bytes = std::span<std::uint8_t>;
#else
/// A pointer and a length (std::span<const/mutable uint8_t> in C++20).
template <typename T>
class basic_bytes {
  public:
    using element_type = T;
    using value_type = std::remove_cv_t<T>;
    using size_type = std::size_t;
    using iterator = T*;

    constexpr basic_bytes() noexcept = default;
    constexpr basic_bytes(T* data, std::size_t size) noexcept : data_(data), size_(size) {}
    template <std::size_t N>
    constexpr basic_bytes(T (&a)[N]) noexcept : data_(a), size_(N) {}
    // Any contiguous container of uint8_t: std::vector, std::array, ...
    template <typename C, typename = std::enable_if_t<std::is_convertible_v<
                              decltype(std::declval<C&>().data()), T*>>,
              typename = decltype(std::declval<C&>().size())>
    constexpr basic_bytes(C& c) noexcept : data_(c.data()), size_(c.size()) {}
    template <typename U, typename = std::enable_if_t<std::is_convertible_v<U*, T*>>>
    constexpr basic_bytes(basic_bytes<U> o) noexcept : data_(o.data()), size_(o.size()) {}

    constexpr T* data() const noexcept { return data_; }
    constexpr std::size_t size() const noexcept { return size_; }
    constexpr bool empty() const noexcept { return size_ == 0; }
    constexpr T& operator[](std::size_t i) const noexcept { return data_[i]; }
    constexpr T* begin() const noexcept { return data_; }
    constexpr T* end() const noexcept { return data_ + size_; }

  private:
    T* data_ = nullptr;
    std::size_t size_ = 0;
};
using bytes = basic_bytes<const std::uint8_t>;
using mutable_bytes = basic_bytes<std::uint8_t>;
#endif

/// The bytes of a string (no copy).
inline bytes as_bytes(std::string_view s) noexcept {
    return bytes(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
}

/// Bytes as a string_view (no copy).
inline std::string_view as_string(bytes b) noexcept {
    return std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
}

/// A NUL-terminated string argument (a literal, a const char*, a
/// std::string; nullptr where the C API takes NULL). Not a string_view:
/// the C API wants the NUL, and copying one in would allocate.
class zstring {
  public:
    constexpr zstring(std::nullptr_t) noexcept {}
    constexpr zstring(const char* s) noexcept : s_(s) {}
    zstring(const std::string& s) noexcept : s_(s.c_str()) {}
    zstring(std::string_view) = delete;
    constexpr const char* c_str() const noexcept { return s_; }

  private:
    const char* s_ = nullptr;
};

/// The name of a status code ("TW_ERR_INVALID").
constexpr const char* status_name(tw_status s) noexcept {
    switch (s) {
    case TW_OK: return "TW_OK";
    case TW_ERR_NULL: return "TW_ERR_NULL";
    case TW_ERR_INVALID: return "TW_ERR_INVALID";
    case TW_ERR_IO: return "TW_ERR_IO";
    case TW_ERR_BACK_PRESSURED: return "TW_ERR_BACK_PRESSURED";
    case TW_ERR_NOT_CONNECTED: return "TW_ERR_NOT_CONNECTED";
    case TW_ERR_TOO_LARGE: return "TW_ERR_TOO_LARGE";
    case TW_ERR_BUFFER_TOO_SMALL: return "TW_ERR_BUFFER_TOO_SMALL";
    case TW_ERR_TIMEOUT: return "TW_ERR_TIMEOUT";
    case TW_ERR_REFUSED: return "TW_ERR_REFUSED";
    case TW_ERR_CLOSED: return "TW_ERR_CLOSED";
    case TW_ERR_PANIC: return "TW_ERR_PANIC";
    case TW_ERR_BUSY: return "TW_ERR_BUSY";
    }
    return "TW_ERR_UNKNOWN";
}

/// A failed call: its status code and what tw_last_error() said.
class Error : public std::runtime_error {
  public:
    Error(tw_status code, const std::string& what) : std::runtime_error(what), code_(code) {}
    /// Why: a TW_ERR_* code.
    tw_status code() const noexcept { return code_; }

  private:
    tw_status code_;
};

/// TW_ERR_BUFFER_TOO_SMALL from Subscription::receive: the length the
/// message needs (it is kept for the next receive).
class BufferTooSmall : public Error {
  public:
    BufferTooSmall(std::size_t needed, const std::string& what)
        : Error(TW_ERR_BUFFER_TOO_SMALL, what), needed_(needed) {}
    std::size_t needed() const noexcept { return needed_; }

  private:
    std::size_t needed_;
};

namespace detail {

// Out of line and cold: the hot paths inline to the C call and a compare.
[[noreturn]] TICKWIRE_HPP_COLD inline void fail(tw_status s, const char* call, bool inert) {
    if (inert) {
        // The C API saw NULL: this wrapper's handle was moved from or closed.
        throw Error(TW_ERR_CLOSED, std::string(call) + ": TW_ERR_CLOSED: the handle was closed or moved from");
    }
    throw Error(s, std::string(call) + ": " + status_name(s) + ": " + tw_last_error());
}

inline void check(tw_status s, const char* call, const void* handle) {
    if (s != TW_OK) {
        fail(s, call, handle == nullptr && s == TW_ERR_NULL);
    }
}

// True on TW_OK, false on what a hot path must expect, throws otherwise.
inline bool check_soft(tw_status s, const char* call, const void* handle) {
    if (s == TW_OK) {
        return true;
    }
    if (s == TW_ERR_BACK_PRESSURED || s == TW_ERR_NOT_CONNECTED) {
        return false;
    }
    fail(s, call, handle == nullptr && s == TW_ERR_NULL);
}

// The C API takes NULL only with a length of 0; a span's data() may be
// NULL then, which it accepts too.
inline const std::uint8_t* ptr(bytes b) noexcept { return b.data(); }

}  // namespace detail

/// One event, as the callback of a poll sees it: a view of the tw_event,
/// valid during the call only (copy what is kept).
class Event {
  public:
    explicit Event(const tw_event& e) noexcept : e_(&e) {}
    tw_event_kind kind() const noexcept { return e_->kind; }
    bool is_message() const noexcept { return e_->kind == TW_EVENT_MESSAGE; }
    std::string_view topic() const noexcept { return sv(e_->topic, e_->topic_len); }
    tw::bytes payload() const noexcept { return tw::bytes(e_->payload, e_->payload_len); }
    /// The payload as text.
    std::string_view text() const noexcept { return as_string(payload()); }
    tw::bytes headers() const noexcept { return tw::bytes(e_->headers, e_->headers_len); }
    std::string_view inbox() const noexcept { return sv(e_->inbox, e_->inbox_len); }
    std::string_view reason() const noexcept { return sv(e_->reason, e_->reason_len); }
    std::uint64_t sequence() const noexcept { return e_->sequence; }
    std::uint64_t to() const noexcept { return e_->to; }
    std::uint32_t discarded() const noexcept { return e_->discarded; }
    std::uint32_t subscription() const noexcept { return e_->subscription; }
    std::uint32_t deliveries() const noexcept { return e_->deliveries; }
    std::uint32_t session() const noexcept { return e_->session; }
    std::uint32_t flags() const noexcept { return e_->flags; }
    std::int32_t code() const noexcept { return e_->code; }
    /// The C event itself.
    const tw_event& raw() const noexcept { return *e_; }

  private:
    static std::string_view sv(const char* p, std::size_t n) noexcept {
        return n == 0 ? std::string_view() : std::string_view(p, n);
    }
    const tw_event* e_;
};

namespace detail {

// The callable and an exception it threw: exceptions may not cross the C
// frames of a poll, so the trampoline catches one, passes the rest of the
// batch over, and the poll rethrows it once the C call has returned.
template <typename F>
struct Poller {
    F& f;
    std::exception_ptr error;

    static void trampoline(void* user, const tw_event* e) noexcept {
        auto* self = static_cast<Poller*>(user);
        if (self->error) {
            return;
        }
        try {
            if constexpr (std::is_invocable_v<F&, const Event&>) {
                self->f(Event(*e));
            } else {
                static_assert(std::is_invocable_v<F&, const tw_event&>,
                              "a poll callback takes a tw::Event or a const tw_event&");
                self->f(*e);
            }
        } catch (...) {
            self->error = std::current_exception();
        }
    }
};

template <typename H, typename F>
inline std::size_t poll(tw_status (*c_poll)(H*, tw_handler, void*, std::uintptr_t, std::uintptr_t*), H* h,
                        F& f, std::size_t max, const char* call) {
    Poller<F> p{f, nullptr};
    std::uintptr_t n = 0;
    tw_status s = c_poll(h, &Poller<F>::trampoline, &p, max, &n);
    if (p.error) {
        std::rethrow_exception(p.error);
    }
    check(s, call, h);
    return n;
}

template <typename D>
inline std::uint64_t ms(D d) {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

}  // namespace detail

/// A publication on a channel (from Context::publication).
class Publication {
  public:
    Publication() noexcept = default;
    /// Takes ownership of a handle from tw_publication_open.
    explicit Publication(tw_publication* p) noexcept : p_(p) {}
    Publication(Publication&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    Publication& operator=(Publication&& o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
        }
        return *this;
    }
    Publication(const Publication&) = delete;
    Publication& operator=(const Publication&) = delete;
    ~Publication() { reset(); }

    /// Publishes `data` on `topic` (nullptr: none); its position into
    /// `*position` if given. False when there is no room now
    /// (TW_ERR_BACK_PRESSURED) or no subscriber yet (TW_ERR_NOT_CONNECTED):
    /// retry. Throws tw::Error otherwise.
    bool offer(zstring topic, bytes data, std::uint64_t* position = nullptr) {
        return detail::check_soft(tw_publication_offer(p_, topic.c_str(), detail::ptr(data), data.size(), position),
                                  "tw_publication_offer", p_);
    }
    bool offer(zstring topic, std::string_view text, std::uint64_t* position = nullptr) {
        return offer(topic, as_bytes(text), position);
    }
    bool offer(bytes data) { return offer(nullptr, data); }
    bool offer(std::string_view text) { return offer(nullptr, as_bytes(text)); }
    /// The raw status of an offer, never throwing.
    tw_status try_offer(zstring topic, bytes data, std::uint64_t* position = nullptr) noexcept {
        return tw_publication_offer(p_, topic.c_str(), detail::ptr(data), data.size(), position);
    }

    /// The duty cycle (reliable UDP); the work done.
    std::size_t do_work() {
        std::uintptr_t n = 0;
        detail::check(tw_publication_do_work(p_, &n), "tw_publication_do_work", p_);
        return n;
    }

    /// Ends the stream, waiting up to `linger` for reliable UDP receivers.
    /// Throws what closing says; the handle is inert afterwards (unless
    /// TW_ERR_BUSY: called from its own poll's callback).
    void close(std::chrono::milliseconds linger = std::chrono::milliseconds(0)) {
        tw_publication* p = p_;
        tw_status s = tw_publication_close(p, detail::ms(linger));
        if (s != TW_ERR_BUSY) {
            p_ = nullptr;
        }
        detail::check(s, "tw_publication_close", p);
    }

    tw_publication* get() const noexcept { return p_; }
    /// Gives the handle up (the caller closes it).
    tw_publication* release() noexcept { return std::exchange(p_, nullptr); }
    explicit operator bool() const noexcept { return p_ != nullptr; }

  private:
    void reset() noexcept {
        if (p_ != nullptr) {
            (void)tw_publication_close(std::exchange(p_, nullptr), 0);
        }
    }
    tw_publication* p_ = nullptr;
};

/// A subscription on a channel (from Context::subscription).
class Subscription {
  public:
    Subscription() noexcept = default;
    /// Takes ownership of a handle from tw_subscription_open.
    explicit Subscription(tw_subscription* s) noexcept : s_(s) {}
    Subscription(Subscription&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    Subscription& operator=(Subscription&& o) noexcept {
        if (this != &o) {
            reset();
            s_ = std::exchange(o.s_, nullptr);
        }
        return *this;
    }
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;
    ~Subscription() { reset(); }

    /// Hands up to `max` events to `f` (a tw::Event or const tw_event&);
    /// their count. `f` may not call this subscription (TW_ERR_BUSY). An
    /// exception `f` throws is rethrown here once the C poll returns; the
    /// rest of that batch is passed over.
    template <typename F>
    std::size_t poll(F&& f, std::size_t max = 256) {
        return detail::poll(&tw_subscription_poll, s_, f, max, "tw_subscription_poll");
    }

    /// Copies the next message's payload into `buf`; its length, or
    /// nothing if none came within `timeout` (0: look once). A payload
    /// longer than `buf` throws tw::BufferTooSmall (its length; the message
    /// is kept for the next call).
    std::optional<std::size_t> receive(mutable_bytes buf,
                                       std::chrono::microseconds timeout = std::chrono::microseconds(0)) {
        std::uintptr_t len = 0;
        tw_status s = tw_subscription_receive(s_, buf.data(), buf.size(), &len,
                                              static_cast<std::uint64_t>(timeout.count()));
        if (s == TW_OK) {
            return len;
        }
        if (s == TW_ERR_TIMEOUT) {
            return std::nullopt;
        }
        if (s == TW_ERR_BUFFER_TOO_SMALL) {
            throw BufferTooSmall(len, std::string("tw_subscription_receive: TW_ERR_BUFFER_TOO_SMALL: ") +
                                          tw_last_error());
        }
        detail::fail(s, "tw_subscription_receive", s_ == nullptr && s == TW_ERR_NULL);
    }

    /// Closes the subscription; inert afterwards (unless TW_ERR_BUSY).
    void close() {
        tw_subscription* s = s_;
        tw_status st = tw_subscription_close(s);
        if (st != TW_ERR_BUSY) {
            s_ = nullptr;
        }
        detail::check(st, "tw_subscription_close", s);
    }

    tw_subscription* get() const noexcept { return s_; }
    tw_subscription* release() noexcept { return std::exchange(s_, nullptr); }
    explicit operator bool() const noexcept { return s_ != nullptr; }

  private:
    void reset() noexcept {
        if (s_ != nullptr) {
            (void)tw_subscription_close(std::exchange(s_, nullptr));
        }
    }
    tw_subscription* s_ = nullptr;
};

/// A tickwire directory: where shared-memory logs and counters are.
/// Closing it leaves its publications and subscriptions usable.
class Context {
  public:
    Context() noexcept = default;
    explicit Context(tw_context* c) noexcept : c_(c) {}
    Context(Context&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
    Context& operator=(Context&& o) noexcept {
        if (this != &o) {
            reset();
            c_ = std::exchange(o.c_, nullptr);
        }
        return *this;
    }
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    ~Context() { reset(); }

    /// Opens the directory `dir` (nullptr: /dev/shm/tickwire-USER).
    static Context open(zstring dir = nullptr) {
        tw_context* c = nullptr;
        detail::check(tw_context_open(dir.c_str(), &c), "tw_context_open", &c);
        return Context(c);
    }

    /// A publication on `channel` (ipc:NAME, udp://HOST:PORT, ...), `stream`.
    Publication publication(zstring channel, std::uint32_t stream) {
        tw_publication* p = nullptr;
        detail::check(tw_publication_open(c_, channel.c_str(), stream, &p), "tw_publication_open", c_);
        return Publication(p);
    }

    /// A subscription on `channel`, `stream`.
    Subscription subscription(zstring channel, std::uint32_t stream) {
        tw_subscription* s = nullptr;
        detail::check(tw_subscription_open(c_, channel.c_str(), stream, &s), "tw_subscription_open", c_);
        return Subscription(s);
    }

    void close() {
        tw_context* c = c_;
        tw_status s = tw_context_close(c);
        if (s != TW_ERR_BUSY) {
            c_ = nullptr;
        }
        detail::check(s, "tw_context_close", c);
    }

    tw_context* get() const noexcept { return c_; }
    tw_context* release() noexcept { return std::exchange(c_, nullptr); }
    explicit operator bool() const noexcept { return c_ != nullptr; }

  private:
    void reset() noexcept {
        if (c_ != nullptr) {
            (void)tw_context_close(std::exchange(c_, nullptr));
        }
    }
    tw_context* c_ = nullptr;
};

/// How a client connects; every field may be left empty: the default.
struct ClientOptions {
    /// Its name at the router.
    std::optional<std::string> name;
    /// The tickwire directory (ipc).
    std::optional<std::string> dir;
    /// A user and password, for a router with users.
    std::optional<std::string> user;
    std::optional<std::string> password;
    /// tls://: the certificate authority (PEM) the router's must chain to.
    std::optional<std::string> tls_ca;
    /// Mutual TLS: this client's certificate and key (PEM).
    std::optional<std::string> tls_cert;
    std::optional<std::string> tls_key;
    /// This client's publishes do not reach its own subscriptions.
    bool no_echo = false;

    /// The C options, pointing into this struct (valid while it lives,
    /// unchanged).
    tw_client_options c_options() const noexcept {
        auto s = [](const std::optional<std::string>& o) { return o ? o->c_str() : nullptr; };
        tw_client_options c{};
        c.name = s(name);
        c.dir = s(dir);
        c.user = s(user);
        c.password = s(password);
        c.tls_ca = s(tls_ca);
        c.tls_cert = s(tls_cert);
        c.tls_key = s(tls_key);
        c.no_echo = no_echo ? 1 : 0;
        return c;
    }
};

/// A router client.
class Client {
  public:
    Client() noexcept = default;
    explicit Client(tw_client* c) noexcept : c_(c) {}
    Client(Client&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
    Client& operator=(Client&& o) noexcept {
        if (this != &o) {
            reset();
            c_ = std::exchange(o.c_, nullptr);
        }
        return *this;
    }
    Client(const Client&) = delete;
    Client& operator=(const Client&) = delete;
    ~Client() { reset(); }

    /// Connects to the router at `uri` (ipc, tcp://HOST:PORT,
    /// tls://HOST:PORT). The login finishes in the background:
    /// wait_connected(), or the TW_EVENT_CONNECTED event.
    static Client connect(zstring uri, const ClientOptions& options = {}) {
        tw_client_options o = options.c_options();
        tw_client* c = nullptr;
        detail::check(tw_client_connect(uri.c_str(), &o, &c), "tw_client_connect", &c);
        return Client(c);
    }

    /// Waits up to `timeout` for the router's welcome; throws tw::Error
    /// (TW_ERR_TIMEOUT, TW_ERR_REFUSED, ...) if it does not come.
    template <typename Rep, typename Period>
    void wait_connected(std::chrono::duration<Rep, Period> timeout) {
        detail::check(tw_client_wait_connected(c_, detail::ms(timeout)), "tw_client_wait_connected", c_);
    }

    /// Subscribes to `pattern` (`*` one level, `>` the rest), in queue
    /// group `group` if not nullptr; its id.
    std::uint32_t subscribe(zstring pattern, zstring group = nullptr) {
        std::uint32_t id = 0;
        detail::check(tw_client_subscribe(c_, pattern.c_str(), group.c_str(), &id), "tw_client_subscribe", c_);
        return id;
    }

    /// Subscribes durably (guaranteed delivery to the durable subscription
    /// `name`; acknowledge with ack()); its id.
    std::uint32_t subscribe_durable(zstring pattern, zstring name) {
        std::uint32_t id = 0;
        detail::check(tw_client_subscribe_durable(c_, pattern.c_str(), name.c_str(), &id),
                      "tw_client_subscribe_durable", c_);
        return id;
    }

    void unsubscribe(std::uint32_t id) { detail::check(tw_client_unsubscribe(c_, id), "tw_client_unsubscribe", c_); }

    /// Publishes `data` on `topic`. False when back-pressured or not
    /// connected (poll, then retry); throws tw::Error otherwise.
    bool publish(zstring topic, bytes data) {
        return detail::check_soft(tw_client_publish(c_, topic.c_str(), detail::ptr(data), data.size()),
                                  "tw_client_publish", c_);
    }
    bool publish(zstring topic, std::string_view text) { return publish(topic, as_bytes(text)); }
    /// The raw status of a publish, never throwing.
    tw_status try_publish(zstring topic, bytes data) noexcept {
        return tw_client_publish(c_, topic.c_str(), detail::ptr(data), data.size());
    }

    /// Publishes in guaranteed mode; its sequence, or nothing when
    /// back-pressured (the window is full) or not connected.
    std::optional<std::uint64_t> publish_guaranteed(zstring topic, bytes data) {
        std::uint64_t seq = 0;
        if (!detail::check_soft(
                tw_client_publish_guaranteed(c_, topic.c_str(), detail::ptr(data), data.size(), &seq),
                "tw_client_publish_guaranteed", c_)) {
            return std::nullopt;
        }
        return seq;
    }
    std::optional<std::uint64_t> publish_guaranteed(zstring topic, std::string_view text) {
        return publish_guaranteed(topic, as_bytes(text));
    }

    /// Every guaranteed publish up to this sequence is acknowledged.
    std::uint64_t acknowledged() {
        std::uint64_t n = 0;
        detail::check(tw_client_acknowledged(c_, &n), "tw_client_acknowledged", c_);
        return n;
    }

    /// Acknowledges durable subscription `subscription` up to `sequence`.
    void ack(std::uint32_t subscription, std::uint64_t sequence) {
        detail::check(tw_client_ack(c_, subscription, sequence), "tw_client_ack", c_);
    }

    /// Sends a request; its id (the TW_EVENT_REPLY's or
    /// TW_EVENT_REQUEST_FAILED's sequence), or nothing when back-pressured
    /// or not connected.
    template <typename Rep, typename Period>
    std::optional<std::uint64_t> request(zstring topic, bytes data, std::chrono::duration<Rep, Period> timeout) {
        std::uint64_t id = 0;
        if (!detail::check_soft(tw_client_request(c_, topic.c_str(), detail::ptr(data), data.size(),
                                                  detail::ms(timeout), &id),
                                "tw_client_request", c_)) {
            return std::nullopt;
        }
        return id;
    }
    template <typename Rep, typename Period>
    std::optional<std::uint64_t> request(zstring topic, std::string_view text,
                                         std::chrono::duration<Rep, Period> timeout) {
        return request(topic, as_bytes(text), timeout);
    }

    /// Answers a request on its inbox (copied out of the TW_EVENT_REQUEST:
    /// reply after the poll returns). False when back-pressured or not
    /// connected.
    bool reply(std::string_view inbox, bytes data) {
        return detail::check_soft(tw_client_reply(c_, inbox.data(), inbox.size(), detail::ptr(data), data.size()),
                                  "tw_client_reply", c_);
    }
    bool reply(std::string_view inbox, std::string_view text) { return reply(inbox, as_bytes(text)); }

    /// Writes what is held back for batching (TCP). False when
    /// back-pressured or not connected.
    bool flush() { return detail::check_soft(tw_client_flush(c_), "tw_client_flush", c_); }

    /// Hands up to `max` events to `f` (a tw::Event or const tw_event&);
    /// their count. Also the duty cycle (heartbeats, reconnection, request
    /// timeouts). `f` may not call this client (TW_ERR_BUSY): copy what it
    /// needs, act after poll returns. An exception `f` throws is rethrown
    /// here once the C poll returns; the rest of that batch is passed over.
    template <typename F>
    std::size_t poll(F&& f, std::size_t max = 256) {
        return detail::poll(&tw_client_poll, c_, f, max, "tw_client_poll");
    }
    /// The duty cycle only: events are passed over.
    std::size_t poll() {
        return poll([](const tw_event&) {});
    }

    /// Closes the client: its session at the router ends. The handle is
    /// inert afterwards (unless TW_ERR_BUSY: from its own poll's callback).
    void close() {
        tw_client* c = c_;
        tw_status s = tw_client_close(c);
        if (s != TW_ERR_BUSY) {
            c_ = nullptr;
        }
        detail::check(s, "tw_client_close", c);
    }

    tw_client* get() const noexcept { return c_; }
    tw_client* release() noexcept { return std::exchange(c_, nullptr); }
    explicit operator bool() const noexcept { return c_ != nullptr; }

  private:
    void reset() noexcept {
        if (c_ != nullptr) {
            (void)tw_client_close(std::exchange(c_, nullptr));
        }
    }
    tw_client* c_ = nullptr;
};

}  // namespace tw

#undef TICKWIRE_HPP_COLD

#endif  // TICKWIRE_HPP
