// include/tickwire.hpp: channels in one process, move semantics, errors
// as tw::Error, and a router client against TICKWIRE_TEST_ROUTER (started
// by crates/ffi/tests/cpp.rs; the router tests are skipped without it).
#include <array>
#include <chrono>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common.hpp"

using namespace std::chrono_literals;

static_assert(std::is_same_v<tw::bytes, std::span<const std::uint8_t>>, "C++20: tw::bytes is std::span");
static_assert(!std::is_copy_constructible_v<tw::Publication> && std::is_nothrow_move_constructible_v<tw::Publication>);
static_assert(!std::is_copy_assignable_v<tw::Client> && std::is_nothrow_move_assignable_v<tw::Client>);
static_assert(!std::is_copy_constructible_v<tw::Subscription> && !std::is_copy_constructible_v<tw::Context>);

using Channel = Scratch;
using Moves = Scratch;
using Errors = Scratch;

// Offers until there is room.
static void offer(tw::Publication& p, const char* topic, std::string_view msg) {
    for (int i = 0; !p.offer(topic, msg); i++) {
        ASSERT_LT(i, 10'000'000) << "never room";
    }
}

TEST_F(Channel, PubSubOverIpcInOneProcess) {
    auto ctx = tw::Context::open(dir());
    auto pub = ctx.publication("ipc:cpp-pubsub", 1);
    auto sub = ctx.subscription("ipc:cpp-pubsub", 1);
    constexpr int n = 1000;
    std::vector<std::string> sent;
    for (int i = 0; i < n; i++) {
        sent.push_back(std::string("quote ").append(std::to_string(i)));
        std::uint64_t position = 0;
        while (!pub.offer("md/eu/VOD", sent.back(), &position)) {
        }
        EXPECT_GT(position, 0u);
    }
    std::vector<std::string> got;
    std::optional<std::uint64_t> last;
    bool ordered = true;
    auto until = std::chrono::steady_clock::now() + 10s;
    while (got.size() < sent.size() && std::chrono::steady_clock::now() < until) {
        sub.poll([&](const tw::Event& e) {
            if (e.is_message()) {
                EXPECT_EQ(e.topic(), "md/eu/VOD");
                ordered = ordered && (!last || e.sequence() > *last);
                last = e.sequence();
                got.emplace_back(e.text());
            }
        });
    }
    EXPECT_EQ(got, sent);
    EXPECT_TRUE(ordered);

    // The raw tw_event, and the copying receive.
    ASSERT_TRUE(pub.offer(nullptr, tw::as_bytes("raw")));
    std::string raw;
    for (int i = 0; i < 100000 && raw.empty(); i++) {
        sub.poll([&](const tw_event& e) {
            if (e.kind == TW_EVENT_MESSAGE) {
                raw.assign(reinterpret_cast<const char*>(e.payload), e.payload_len);
            }
        });
    }
    EXPECT_EQ(raw, "raw");
    std::array<std::uint8_t, 64> buf{};
    EXPECT_EQ(sub.receive(buf), std::nullopt) << "nothing there: an empty optional";
    offer(pub, "t", "copied");
    auto len = sub.receive(buf, 1s);
    ASSERT_TRUE(len.has_value());
    EXPECT_EQ(tw::as_string(tw::bytes(buf).first(*len)), "copied");

    // Closing explicitly reports; the handles are inert afterwards.
    sub.close();
    pub.close();
    ctx.close();
    EXPECT_FALSE(sub);
    EXPECT_FALSE(pub);
    EXPECT_FALSE(ctx);
}

TEST_F(Channel, ExceptionsFromACallbackComeOutOfPoll) {
    auto ctx = tw::Context::open(dir());
    auto pub = ctx.publication("ipc:cpp-throw", 1);
    auto sub = ctx.subscription("ipc:cpp-throw", 1);
    offer(pub, "t", "one");
    offer(pub, "t", "two");
    int calls = 0;
    try {
        for (int i = 0; i < 100000; i++) {
            sub.poll([&](const tw::Event& e) {
                if (e.is_message()) {
                    calls++;
                    throw std::logic_error("from the callback");
                }
            });
        }
        ADD_FAILURE() << "nothing thrown";
    } catch (const std::logic_error& e) {
        EXPECT_STREQ(e.what(), "from the callback");
    }
    EXPECT_EQ(calls, 1) << "the rest of the batch is passed over";
    // The subscription is usable after.
    offer(pub, "t", "three");
    std::array<std::uint8_t, 16> buf{};
    auto len = sub.receive(buf, 1s);
    ASSERT_TRUE(len.has_value());
    std::string next(tw::as_string(tw::bytes(buf).first(*len)));
    EXPECT_TRUE(next == "three" || next == "two") << next;
}

TEST_F(Channel, ACallbackCallingItsOwnSubscriptionIsBusy) {
    auto ctx = tw::Context::open(dir());
    auto pub = ctx.publication("ipc:cpp-busy", 1);
    auto sub = ctx.subscription("ipc:cpp-busy", 1);
    offer(pub, "t", "x");
    std::array<std::uint8_t, 16> buf{};
    bool seen = false;
    for (int i = 0; i < 100000 && !seen; i++) {
        sub.poll([&](const tw::Event& e) {
            if (e.is_message()) {
                seen = true;
                EXPECT_TW_ERROR(sub.receive(buf), TW_ERR_BUSY);
                EXPECT_TW_ERROR(sub.close(), TW_ERR_BUSY);
            }
        });
    }
    EXPECT_TRUE(seen);
    EXPECT_TRUE(sub) << "close() refused as busy leaves the handle open";
    sub.close();
}

TEST_F(Moves, AMovedFromHandleIsInertAndNothingClosesTwice) {
    auto ctx = tw::Context::open(dir());
    tw::Publication a = ctx.publication("ipc:cpp-move", 1);
    tw_publication* raw = a.get();
    tw::Publication b = std::move(a);
    EXPECT_FALSE(a);
    EXPECT_EQ(a.get(), nullptr);
    EXPECT_EQ(b.get(), raw);
    // The moved-from handle: every call refused as closed, its destructor
    // a no-op.
    EXPECT_TW_ERROR(a.offer("t", "x"), TW_ERR_CLOSED);
    EXPECT_TW_ERROR(a.do_work(), TW_ERR_CLOSED);
    EXPECT_TW_ERROR(a.close(), TW_ERR_CLOSED);
    { tw::Publication gone = std::move(a); }
    // Still open: the C handle takes an offer.
    auto sub = ctx.subscription("ipc:cpp-move", 1);
    EXPECT_TRUE(b.offer("t", "still open"));

    // Move-assigning over an open handle closes that one (once).
    tw::Publication c = ctx.publication("ipc:cpp-move2", 1);
    tw_publication* old = c.get();
    c = std::move(b);
    EXPECT_EQ(c.get(), raw);
    EXPECT_EQ(tw_publication_offer(old, nullptr, nullptr, 0, nullptr), TW_ERR_CLOSED);
    // Self-move leaves it alone.
    auto& self = c;
    c = std::move(self);
    EXPECT_EQ(c.get(), raw);

    // release() hands the C handle over unclosed: closing it is TW_OK,
    // once.
    tw_publication* released = c.release();
    EXPECT_FALSE(c);
    EXPECT_EQ(tw_publication_close(released, 0), TW_OK);
    EXPECT_EQ(tw_publication_close(released, 0), TW_ERR_CLOSED);

    tw::Subscription s1 = std::move(sub);
    tw::Subscription s2;
    s2 = std::move(s1);
    EXPECT_FALSE(s1);
    tw_subscription* rs = s2.release();
    EXPECT_EQ(tw_subscription_close(rs), TW_OK) << "nothing closed it before";

    tw::Context ctx2 = std::move(ctx);
    EXPECT_FALSE(ctx);
    EXPECT_TW_ERROR(ctx.publication("ipc:cpp-move", 1), TW_ERR_CLOSED);
    EXPECT_TRUE(ctx2);
}

TEST_F(Errors, ABadChannelUriIsInvalid) {
    auto ctx = tw::Context::open(dir());
    EXPECT_TW_ERROR(ctx.publication("nonsense://x", 1), TW_ERR_INVALID);
    EXPECT_TW_ERROR(ctx.subscription("nonsense://x", 1), TW_ERR_INVALID);
    EXPECT_TW_ERROR(tw::Client::connect("nonsense://x"), TW_ERR_INVALID);
    try {
        (void)ctx.publication("nonsense://x", 1);
    } catch (const std::runtime_error& e) {
        // What tw_last_error() said, after the call and the code.
        std::string what = e.what();
        EXPECT_EQ(what.rfind("tw_publication_open: TW_ERR_INVALID: ", 0), 0u) << what;
        EXPECT_GT(what.size(), std::string("tw_publication_open: TW_ERR_INVALID: ").size()) << what;
    }
}

TEST_F(Errors, AClosedHandleIsClosed) {
    auto ctx = tw::Context::open(dir());
    auto pub = ctx.publication("ipc:cpp-closed", 1);
    auto sub = ctx.subscription("ipc:cpp-closed", 1);
    pub.close();
    EXPECT_TW_ERROR(pub.offer("t", "x"), TW_ERR_CLOSED);
    EXPECT_TW_ERROR(pub.close(), TW_ERR_CLOSED);
    sub.close();
    EXPECT_TW_ERROR(sub.poll([](const tw::Event&) {}), TW_ERR_CLOSED);
    std::array<std::uint8_t, 8> buf{};
    EXPECT_TW_ERROR(sub.receive(buf), TW_ERR_CLOSED);

    // A C handle closed behind the wrapper's back: the C API's own
    // TW_ERR_CLOSED and message, and a destructor that ignores it.
    auto pub2 = ctx.publication("ipc:cpp-closed2", 1);
    ASSERT_EQ(tw_publication_close(pub2.get(), 0), TW_OK);
    try {
        (void)pub2.offer("t", "x");
        ADD_FAILURE() << "no error";
    } catch (const tw::Error& e) {
        EXPECT_EQ(e.code(), TW_ERR_CLOSED);
        EXPECT_NE(std::string(e.what()).find("was closed"), std::string::npos) << e.what();
    }
}

TEST_F(Errors, ABufferTooSmall) {
    auto ctx = tw::Context::open(dir());
    auto pub = ctx.publication("ipc:cpp-small", 1);
    auto sub = ctx.subscription("ipc:cpp-small", 1);
    const std::string big(100, 'b');
    offer(pub, "t", big);
    offer(pub, "t", big);
    // The C receive API: the length needed, the message kept.
    std::array<std::uint8_t, 10> small{};
    std::uintptr_t len = 0;
    tw_status s = TW_ERR_TIMEOUT;
    for (int i = 0; i < 1000 && s == TW_ERR_TIMEOUT; i++) {
        s = tw_subscription_receive(sub.get(), small.data(), small.size(), &len, 1000);
    }
    ASSERT_EQ(s, TW_ERR_BUFFER_TOO_SMALL) << tw_last_error();
    EXPECT_EQ(len, 100u);
    // The wrapper: tw::BufferTooSmall, a tw::Error with that code.
    try {
        (void)sub.receive(small, 1s);
        ADD_FAILURE() << "no error";
    } catch (const tw::BufferTooSmall& e) {
        EXPECT_EQ(e.code(), TW_ERR_BUFFER_TOO_SMALL);
        EXPECT_EQ(e.needed(), 100u);
    }
    EXPECT_TW_ERROR(sub.receive(small, 1s), TW_ERR_BUFFER_TOO_SMALL);
    std::vector<std::uint8_t> enough(200);
    EXPECT_EQ(sub.receive(enough, 1s), std::optional<std::size_t>(100));
    EXPECT_EQ(sub.receive(enough, 1s), std::optional<std::size_t>(100)) << "the second one";
    EXPECT_EQ(sub.receive(enough, 1ms), std::nullopt);
}

TEST(ClientOptions, MapToTheCOptions) {
    tw::ClientOptions o;
    tw_client_options none = o.c_options();
    EXPECT_EQ(none.name, nullptr);
    EXPECT_EQ(none.dir, nullptr);
    EXPECT_EQ(none.tls_key, nullptr);
    EXPECT_EQ(none.no_echo, 0);
    o.name = "n";
    o.user = "u";
    o.password = "p";
    o.tls_ca = "ca.pem";
    o.no_echo = true;
    tw_client_options c = o.c_options();
    EXPECT_STREQ(c.name, "n");
    EXPECT_STREQ(c.user, "u");
    EXPECT_STREQ(c.password, "p");
    EXPECT_STREQ(c.tls_ca, "ca.pem");
    EXPECT_EQ(c.tls_cert, nullptr);
    EXPECT_EQ(c.no_echo, 1);
}

// A router client against the router crates/ffi/tests/cpp.rs runs.
class Router : public ::testing::Test {
  protected:
    void SetUp() override {
        const char* uri = getenv("TICKWIRE_TEST_ROUTER");
        if (uri == nullptr || *uri == '\0') {
            GTEST_SKIP() << "TICKWIRE_TEST_ROUTER is not set";
        }
        uri_ = uri;
    }
    tw::Client connect(const char* name) {
        tw::ClientOptions o;
        o.name = name;
        auto c = tw::Client::connect(uri_, o);
        c.wait_connected(10s);
        return c;
    }
    std::string uri_;
};

TEST_F(Router, PublishesAndReceivesItsOwnMessagesInOrder) {
    auto c = connect("cpp-gtest");
    std::uint32_t id = c.subscribe("cpp/gtest/>");
    EXPECT_GT(id, 0u);
    constexpr int n = 500;
    for (int i = 0; i < n; i++) {
        std::string msg = std::string("m").append(std::to_string(i));
        while (!c.publish("cpp/gtest/a", msg)) {
            c.poll();
        }
    }
    while (!c.flush()) {
        c.poll();
    }
    std::vector<std::string> got;
    auto until = std::chrono::steady_clock::now() + 20s;
    while (got.size() < n && std::chrono::steady_clock::now() < until) {
        if (c.poll([&](const tw::Event& e) {
                if (e.is_message() && e.topic() == "cpp/gtest/a") {
                    got.emplace_back(e.text());
                }
            }) == 0) {
            std::this_thread::sleep_for(100us);
        }
    }
    ASSERT_EQ(got.size(), std::size_t(n));
    for (int i = 0; i < n; i++) {
        ASSERT_EQ(got[i], std::string("m").append(std::to_string(i)));
    }
    c.unsubscribe(id);
    c.close();
    EXPECT_FALSE(c);
    EXPECT_TW_ERROR(c.publish("cpp/gtest/a", "x"), TW_ERR_CLOSED);
}

TEST_F(Router, AnswersItsOwnRequestAfterThePoll) {
    auto c = connect("cpp-rfq");
    c.subscribe("cpp/rfq");
    // The subscription reaches the router before the request: same
    // connection, in order.
    auto req = c.request("cpp/rfq", "buy 100", 5s);
    ASSERT_TRUE(req.has_value());
    while (!c.flush()) {
        c.poll();
    }
    std::string inbox, question, reply;
    bool busy = false, answered = false, failed = false;
    auto until = std::chrono::steady_clock::now() + 20s;
    while (reply.empty() && !failed && std::chrono::steady_clock::now() < until) {
        c.poll([&](const tw::Event& e) {
            switch (e.kind()) {
            case TW_EVENT_REQUEST:
                inbox = e.inbox();
                question = e.text();
                // Not from the callback: TW_ERR_BUSY.
                try {
                    (void)c.publish("cpp/x", "x");
                } catch (const tw::Error& err) {
                    busy = err.code() == TW_ERR_BUSY;
                }
                break;
            case TW_EVENT_REPLY:
                EXPECT_EQ(e.sequence(), *req);
                reply = e.text();
                break;
            case TW_EVENT_REQUEST_FAILED:
                failed = true;
                break;
            default:
                break;
            }
        });
        if (!inbox.empty() && !answered) {
            answered = c.reply(inbox, std::string("quote ").append(question));
            c.flush();
        }
        std::this_thread::sleep_for(100us);
    }
    EXPECT_TRUE(busy);
    EXPECT_FALSE(failed);
    EXPECT_EQ(question, "buy 100");
    EXPECT_EQ(reply, "quote buy 100");
}

TEST_F(Router, MisuseIsATwError) {
    auto c = connect("cpp-misuse");
    EXPECT_TW_ERROR(c.publish("bad//topic", "x"), TW_ERR_INVALID);
    EXPECT_TW_ERROR(c.subscribe("bad//topic"), TW_ERR_INVALID);
    EXPECT_TW_ERROR(c.publish(nullptr, "x"), TW_ERR_NULL);
    tw::Client moved = std::move(c);
    EXPECT_TW_ERROR(c.poll(), TW_ERR_CLOSED);
    EXPECT_TW_ERROR(c.wait_connected(1ms), TW_ERR_CLOSED);
    EXPECT_TRUE(moved.publish("cpp/ok", "x"));
    moved.close();
    EXPECT_TW_ERROR(moved.close(), TW_ERR_CLOSED);
}
