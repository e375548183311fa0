// A C++ router client: connects to URI, subscribes to TOPIC, publishes
// COUNT messages "m0", "m1", ... on it, receives them back through the
// router, and prints one JSON line: what it published and received, and
// whether they came back in order, byte for byte.
//
//   pubsub URI [TOPIC] [COUNT]      e.g. pubsub tcp://127.0.0.1:4222 md/cpp 1000
//
// docs/cpp.md walks through it; crates/ffi/tests/cpp.rs runs it.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "tickwire.hpp"

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: pubsub URI [TOPIC] [COUNT]\n");
        return 2;
    }
    const std::string topic = argc > 2 ? argv[2] : "md/cpp";
    const long count = argc > 3 ? std::atol(argv[3]) : 1000;
    try {
        tw::ClientOptions options;
        options.name = "cpp-pubsub";
        tw::Client client = tw::Client::connect(argv[1], options);
        client.wait_connected(std::chrono::seconds(10));
        client.subscribe(topic);

        // What comes back: counted and checked in the callback, which may
        // not call the client (TW_ERR_BUSY).
        long received = 0, connected = 0;
        bool in_order = true;
        auto on_event = [&](const tw::Event& e) {
            if (e.is_message() && e.topic() == topic) {
                std::string want = std::string("m").append(std::to_string(received));
                in_order = in_order && e.text() == want;
                received++;
            } else if (e.kind() == TW_EVENT_CONNECTED) {
                connected++;
            }
        };

        long back_pressured = 0;
        for (long i = 0; i < count; i++) {
            std::string msg = std::string("m").append(std::to_string(i));
            // False: the router is behind (or not connected yet): poll, retry.
            while (!client.publish(topic, msg)) {
                back_pressured++;
                client.poll(on_event);
            }
        }
        while (!client.flush()) {
            client.poll(on_event);
        }

        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (received < count && std::chrono::steady_clock::now() < until) {
            if (client.poll(on_event) == 0) {
                std::this_thread::sleep_for(std::chrono::microseconds(100));
            }
        }
        client.close();
        std::printf(
            "{\"published\": %ld, \"received\": %ld, \"in_order\": %s, \"back_pressured\": %ld, "
            "\"connected_events\": %ld}\n",
            count, received, in_order ? "true" : "false", back_pressured, connected);
        return received == count && in_order ? 0 : 1;
    } catch (const tw::Error& e) {
        std::fprintf(stderr, "pubsub: %s (status %d)\n", e.what(), static_cast<int>(e.code()));
        return 1;
    }
}
