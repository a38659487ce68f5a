/* A bounded TCP-with-timestamps frame generator for bench/passive_bpf.py.
 *
 *     tcp_blast IFNAME PACKETS FLOWS SECONDS [RATE]
 *
 * Sends PACKETS Ethernet frames (or stops after SECONDS) on IFNAME through an
 * AF_PACKET socket that bypasses the qdisc, 512 frames per sendmmsg, or at RATE
 * frames per second (64 per sendmmsg, sleeping between them) when given. FLOWS
 * conversations take turns: a client segment of 8 bytes (198.18.x.y:port ->
 * 198.19.0.1:5001, PSH|ACK) then the server's ACK of it, both with the timestamp
 * option, the ACK echoing the segment's TSval and the next segment echoing the
 * ACK's. Per flow, sequence numbers advance by the payload and TSvals by one, as a
 * real bulk sender's would, so every frame is one the passive rules time or answer:
 * a TSval to remember, a TSecr or an ACK that closes a sample.
 *
 * Prints "sent N frames in S seconds" on stdout. Only for namespaces the bench
 * made: the frames carry benchmark addresses (RFC 2544's 198.18.0.0/15).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 512
#define PAYLOAD 8
#define HEADERS (14 + 20 + 32)

struct flow {
	uint32_t client_seq, server_seq, client_ts, server_ts;
};

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static uint16_t ip_checksum(const uint8_t *h)
{
	uint32_t sum = 0;
	for (int i = 0; i < 20; i += 2)
		sum += (h[i] << 8) | h[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

static void put32(uint8_t *p, uint32_t v)
{
	v = htonl(v);
	memcpy(p, &v, 4);
}

/* One frame of flow `f`: the client's segment (from_client) or the server's ACK. */
static size_t frame(uint8_t *b, unsigned f, struct flow *fl, int from_client)
{
	static const uint8_t mac_a[6] = {2, 0x72, 0x74, 0, 0, 1};
	static const uint8_t mac_b[6] = {2, 0x72, 0x74, 0, 0, 2};
	uint8_t client[4] = {198, 18, (f >> 8) & 0xff, f & 0xff};
	uint8_t server[4] = {198, 19, 0, 1};
	uint16_t cport = htons(10000 + f % 50000), sport = htons(5001);
	size_t payload = from_client ? PAYLOAD : 0;
	uint8_t *ip = b + 14, *tcp = ip + 20;

	memcpy(b, mac_b, 6);
	memcpy(b + 6, mac_a, 6);
	b[12] = 0x08, b[13] = 0x00;
	memset(ip, 0, 20);
	ip[0] = 0x45;
	ip[2] = (20 + 32 + payload) >> 8, ip[3] = (20 + 32 + payload) & 0xff;
	ip[6] = 0x40, ip[8] = 64, ip[9] = 6;
	memcpy(ip + 12, from_client ? client : server, 4);
	memcpy(ip + 16, from_client ? server : client, 4);
	uint16_t c = htons(ip_checksum(ip));
	memcpy(ip + 10, &c, 2);

	memset(tcp, 0, 32);
	memcpy(tcp, from_client ? &cport : &sport, 2);
	memcpy(tcp + 2, from_client ? &sport : &cport, 2);
	tcp[12] = 8 << 4;
	tcp[14] = 0xff, tcp[15] = 0xff;
	tcp[20] = 1, tcp[21] = 1, tcp[22] = 8, tcp[23] = 10;
	if (from_client) {
		put32(tcp + 4, fl->client_seq);
		put32(tcp + 8, fl->server_seq);
		tcp[13] = 0x18;
		put32(tcp + 24, fl->client_ts);
		put32(tcp + 28, fl->server_ts);
		memcpy(tcp + 32, "payload!", PAYLOAD);
		fl->client_seq += PAYLOAD;
	} else {
		put32(tcp + 4, fl->server_seq);
		put32(tcp + 8, fl->client_seq);
		tcp[13] = 0x10;
		fl->server_ts++;
		put32(tcp + 24, fl->server_ts);
		put32(tcp + 28, fl->client_ts);
		fl->client_ts++;
	}
	return HEADERS + payload;
}

int main(int argc, char **argv)
{
	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: tcp_blast IFNAME PACKETS FLOWS SECONDS [RATE]\n");
		return 2;
	}
	unsigned ifindex = if_nametoindex(argv[1]);
	long long packets = atoll(argv[2]);
	unsigned flows = atoi(argv[3]);
	double seconds = atof(argv[4]);
	double rate = argc == 6 ? atof(argv[5]) : 0;
	int batch = rate > 0 ? 64 : BATCH;
	if (!ifindex || packets <= 0 || flows == 0 || flows > 65536 || seconds <= 0 || rate < 0) {
		fprintf(stderr, "tcp_blast: bad interface or numbers\n");
		return 2;
	}
	int s = socket(AF_PACKET, SOCK_RAW, 0);
	int one = 1;
	if (s < 0 || setsockopt(s, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one))) {
		perror("tcp_blast: packet socket");
		return 1;
	}
	struct sockaddr_ll to = {.sll_family = AF_PACKET, .sll_ifindex = ifindex, .sll_halen = 6};
	struct flow *fl = calloc(flows, sizeof(*fl));
	static uint8_t bufs[BATCH][HEADERS + PAYLOAD];
	static struct iovec iov[BATCH];
	static struct mmsghdr msgs[BATCH];
	for (unsigned f = 0; f < flows; f++)
		fl[f] = (struct flow){f * 7919u, f * 104729u, f * 31u + 1, f * 17u + 1};
	for (int i = 0; i < BATCH; i++) {
		iov[i].iov_base = bufs[i];
		msgs[i].msg_hdr = (struct msghdr){.msg_name = &to, .msg_namelen = sizeof(to),
						  .msg_iov = &iov[i], .msg_iovlen = 1};
	}
	long long sent = 0;
	unsigned f = 0;
	int from_client = 1;
	double start = now(), deadline = start + seconds;
	prctl(PR_SET_TIMERSLACK, 1);
	while (sent < packets && now() < deadline) {
		if (rate > 0) {
			double due = start + sent / rate, t = now();
			if (due > t) {
				struct timespec d = {(time_t)(due - t), (long)((due - t - (time_t)(due - t)) * 1e9)};
				nanosleep(&d, NULL);
			}
		}
		int n = packets - sent < batch ? packets - sent : batch;
		for (int i = 0; i < n; i++) {
			iov[i].iov_len = frame(bufs[i], f, &fl[f], from_client);
			if (!from_client)
				f = (f + 1) % flows;
			from_client = !from_client;
		}
		int done = sendmmsg(s, msgs, n, 0);
		if (done < 0) {
			perror("tcp_blast: sendmmsg");
			return 1;
		}
		/* Frames the socket refused are not resent: their flows see a gap, as
		 * a capture that missed them would. */
		sent += done;
	}
	printf("sent %lld frames in %.3f seconds\n", sent, now() - start);
	return 0;
}
