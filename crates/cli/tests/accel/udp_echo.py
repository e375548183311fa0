"""An unmodified program for tests/accel.rs: plain Python sockets.

epoll  ADDR PORT LOCAL_PORT N   one socket on ADDR:PORT (accelerated) and
                                one on 127.0.0.1:LOCAL_PORT (the kernel's)
                                in one epoll set; counts N datagrams on each,
                                then N more on the first through
                                settimeout (poll) and recvfrom, then N
                                more through select and recvmsg; prints
                                "xdp=A kernel=B timed=C selected=D"
send   ADDR PORT N              N datagrams "n" to ADDR:PORT
mcrecv GROUP PORT IF N [group]  joins GROUP on the interface of address IF
                                (before binding 0.0.0.0:PORT, as sockperf
                                does, or GROUP:PORT with "group"), prints
                                "ready", counts datagrams until N or 10 s
                                quiet; prints "got=K"
mcsend GROUP PORT IF N          N datagrams to GROUP:PORT from IF
"""
import select
import socket
import sys
import time

def main():
    mode = sys.argv[1]
    if mode in ("mcrecv", "mcsend"):
        on_group = len(sys.argv) > 6 and sys.argv[6] == "group"
        return multicast(mode, sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), on_group)
    if mode == "send":
        addr, port, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for i in range(n):
            s.sendto(b"%d" % i, (addr, port))
            time.sleep(0.001)
        return
    addr, port, local, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    fast = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fast.bind((addr, port))
    fast.setblocking(False)
    slow = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    slow.bind(("127.0.0.1", local))
    slow.setblocking(False)
    ep = select.epoll()
    ep.register(fast.fileno(), select.EPOLLIN)
    ep.register(slow.fileno(), select.EPOLLIN)
    print("ready", flush=True)
    got = {fast.fileno(): 0, slow.fileno(): 0}
    until = time.time() + 20
    while (got[fast.fileno()] < n or got[slow.fileno()] < n) and time.time() < until:
        for fd, _ in ep.poll(1.0):
            s = fast if fd == fast.fileno() else slow
            while True:
                try:
                    s.recvfrom(2048)
                    got[fd] += 1
                except BlockingIOError:
                    break
    fast.settimeout(5)
    timed = 0
    print("timed", flush=True)
    try:
        while timed < n:
            fast.recvfrom(2048)
            timed += 1
    except socket.timeout:
        pass
    fast.setblocking(False)
    selected = 0
    print("selected", flush=True)
    until = time.time() + 20
    while selected < n and time.time() < until:
        r, _, _ = select.select([fast, slow], [], [], 1.0)
        if fast in r:
            fast.recvmsg(2048)
            selected += 1
    print("xdp=%d kernel=%d timed=%d selected=%d"
          % (got[fast.fileno()], got[slow.fileno()], timed, selected), flush=True)

def multicast(mode, group, port, iface, n, on_group=False):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if mode == "mcsend":
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(iface))
        for i in range(n):
            s.sendto(b"%d" % i, (group, port))
            time.sleep(0.001)
        return
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                 socket.inet_aton(group) + socket.inet_aton(iface))
    s.bind((group if on_group else "0.0.0.0", port))
    s.settimeout(10)
    print("ready", flush=True)
    got = 0
    try:
        while got < n:
            s.recvfrom(2048)
            got += 1
    except socket.timeout:
        pass
    print("got=%d" % got, flush=True)

main()
