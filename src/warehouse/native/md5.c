/* MD5 (RFC 1321) of many independent buffers at once.
 *
 * A query step checks the MD5 of every block it reads; one MD5 stream is a
 * chain of dependent 32-bit operations, so a core hashes one buffer at a
 * fraction of its width. Here several buffers are hashed side by side, one
 * in each 32-bit lane of a vector register (eight with AVX2, sixteen with
 * AVX-512): about the instruction count per 64-byte block of one scalar
 * stream, a block of every lane per pass. A lane whose buffer ends takes the
 * next buffer; each lane pads its own message. Without AVX2 (checked at run
 * time, so the library loads on any x86-64) or on another architecture,
 * every buffer is hashed by the plain C code below, one after another.
 *
 * Exported: wh_md5_many(n, ptrs, lens, out) writes the 16-byte digest of
 * buffer i at out + 16 * i; wh_md5_lanes() says how many lanes are used.
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define WH_X86 1
#endif

/* Padding of a message: its tail bytes, 0x80, zeros, then its length in
 * bits (64-bit little-endian) at the end of the last block. */
typedef struct {
    const unsigned char *data; /* the message's whole 64-byte blocks */
    size_t blocks;             /* how many */
    unsigned char tail[128];   /* the rest, padded: one or two blocks */
    size_t tail_blocks;
} message;

static void message_init(message *m, const unsigned char *p, size_t len) {
    size_t rest = len % 64;
    uint64_t bits = (uint64_t)len * 8u;
    m->data = p;
    m->blocks = len / 64;
    memset(m->tail, 0, sizeof m->tail);
    if (rest)
        memcpy(m->tail, p + len - rest, rest);
    m->tail[rest] = 0x80;
    m->tail_blocks = rest < 56 ? 1 : 2;
    for (int i = 0; i < 8; i++)
        m->tail[m->tail_blocks * 64 - 8 + i] = (unsigned char)(bits >> (8 * i));
}

static void put_le32(unsigned char *out, uint32_t v) {
    out[0] = (unsigned char)v;
    out[1] = (unsigned char)(v >> 8);
    out[2] = (unsigned char)(v >> 16);
    out[3] = (unsigned char)(v >> 24);
}

static uint32_t get_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The 64 steps of RFC 1321 (function, word, shift, constant), written
 * once and expanded by each path with its own STEP. */
#define MD5_ROUNDS(STEP) \
    STEP(F, a, b, c, d, 0, 7, 0xd76aa478u); \
    STEP(F, d, a, b, c, 1, 12, 0xe8c7b756u); \
    STEP(F, c, d, a, b, 2, 17, 0x242070dbu); \
    STEP(F, b, c, d, a, 3, 22, 0xc1bdceeeu); \
    STEP(F, a, b, c, d, 4, 7, 0xf57c0fafu); \
    STEP(F, d, a, b, c, 5, 12, 0x4787c62au); \
    STEP(F, c, d, a, b, 6, 17, 0xa8304613u); \
    STEP(F, b, c, d, a, 7, 22, 0xfd469501u); \
    STEP(F, a, b, c, d, 8, 7, 0x698098d8u); \
    STEP(F, d, a, b, c, 9, 12, 0x8b44f7afu); \
    STEP(F, c, d, a, b, 10, 17, 0xffff5bb1u); \
    STEP(F, b, c, d, a, 11, 22, 0x895cd7beu); \
    STEP(F, a, b, c, d, 12, 7, 0x6b901122u); \
    STEP(F, d, a, b, c, 13, 12, 0xfd987193u); \
    STEP(F, c, d, a, b, 14, 17, 0xa679438eu); \
    STEP(F, b, c, d, a, 15, 22, 0x49b40821u); \
    STEP(G, a, b, c, d, 1, 5, 0xf61e2562u); \
    STEP(G, d, a, b, c, 6, 9, 0xc040b340u); \
    STEP(G, c, d, a, b, 11, 14, 0x265e5a51u); \
    STEP(G, b, c, d, a, 0, 20, 0xe9b6c7aau); \
    STEP(G, a, b, c, d, 5, 5, 0xd62f105du); \
    STEP(G, d, a, b, c, 10, 9, 0x02441453u); \
    STEP(G, c, d, a, b, 15, 14, 0xd8a1e681u); \
    STEP(G, b, c, d, a, 4, 20, 0xe7d3fbc8u); \
    STEP(G, a, b, c, d, 9, 5, 0x21e1cde6u); \
    STEP(G, d, a, b, c, 14, 9, 0xc33707d6u); \
    STEP(G, c, d, a, b, 3, 14, 0xf4d50d87u); \
    STEP(G, b, c, d, a, 8, 20, 0x455a14edu); \
    STEP(G, a, b, c, d, 13, 5, 0xa9e3e905u); \
    STEP(G, d, a, b, c, 2, 9, 0xfcefa3f8u); \
    STEP(G, c, d, a, b, 7, 14, 0x676f02d9u); \
    STEP(G, b, c, d, a, 12, 20, 0x8d2a4c8au); \
    STEP(H, a, b, c, d, 5, 4, 0xfffa3942u); \
    STEP(H, d, a, b, c, 8, 11, 0x8771f681u); \
    STEP(H, c, d, a, b, 11, 16, 0x6d9d6122u); \
    STEP(H, b, c, d, a, 14, 23, 0xfde5380cu); \
    STEP(H, a, b, c, d, 1, 4, 0xa4beea44u); \
    STEP(H, d, a, b, c, 4, 11, 0x4bdecfa9u); \
    STEP(H, c, d, a, b, 7, 16, 0xf6bb4b60u); \
    STEP(H, b, c, d, a, 10, 23, 0xbebfbc70u); \
    STEP(H, a, b, c, d, 13, 4, 0x289b7ec6u); \
    STEP(H, d, a, b, c, 0, 11, 0xeaa127fau); \
    STEP(H, c, d, a, b, 3, 16, 0xd4ef3085u); \
    STEP(H, b, c, d, a, 6, 23, 0x04881d05u); \
    STEP(H, a, b, c, d, 9, 4, 0xd9d4d039u); \
    STEP(H, d, a, b, c, 12, 11, 0xe6db99e5u); \
    STEP(H, c, d, a, b, 15, 16, 0x1fa27cf8u); \
    STEP(H, b, c, d, a, 2, 23, 0xc4ac5665u); \
    STEP(I, a, b, c, d, 0, 6, 0xf4292244u); \
    STEP(I, d, a, b, c, 7, 10, 0x432aff97u); \
    STEP(I, c, d, a, b, 14, 15, 0xab9423a7u); \
    STEP(I, b, c, d, a, 5, 21, 0xfc93a039u); \
    STEP(I, a, b, c, d, 12, 6, 0x655b59c3u); \
    STEP(I, d, a, b, c, 3, 10, 0x8f0ccc92u); \
    STEP(I, c, d, a, b, 10, 15, 0xffeff47du); \
    STEP(I, b, c, d, a, 1, 21, 0x85845dd1u); \
    STEP(I, a, b, c, d, 8, 6, 0x6fa87e4fu); \
    STEP(I, d, a, b, c, 15, 10, 0xfe2ce6e0u); \
    STEP(I, c, d, a, b, 6, 15, 0xa3014314u); \
    STEP(I, b, c, d, a, 13, 21, 0x4e0811a1u); \
    STEP(I, a, b, c, d, 4, 6, 0xf7537e82u); \
    STEP(I, d, a, b, c, 11, 10, 0xbd3af235u); \
    STEP(I, c, d, a, b, 2, 15, 0x2ad7d2bbu); \
    STEP(I, b, c, d, a, 9, 21, 0xeb86d391u);

/* ---- one stream, plain C ---- */

#define ROTL(x, s) (((x) << (s)) | ((x) >> (32 - (s))))
#define F(x, y, z) ((z) ^ ((x) & ((y) ^ (z))))
#define G(x, y, z) ((y) ^ ((z) & ((x) ^ (y))))
#define H(x, y, z) ((x) ^ (y) ^ (z))
#define I(x, y, z) ((y) ^ ((x) | ~(z)))
#define STEP(f, a, b, c, d, k, s, t) \
    a = b + ROTL(a + f(b, c, d) + X[k] + (t), s)

static void compress(uint32_t st[4], const unsigned char *block, size_t count) {
    for (; count; count--, block += 64) {
        uint32_t X[16];
        for (int i = 0; i < 16; i++)
            X[i] = get_le32(block + 4 * i);
        uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
        MD5_ROUNDS(STEP);
        st[0] += a;
        st[1] += b;
        st[2] += c;
        st[3] += d;
    }
}

#undef ROTL
#undef F
#undef G
#undef H
#undef I
#undef STEP

static const uint32_t IV[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};

static void digest_out(const uint32_t st[4], unsigned char *out) {
    for (int i = 0; i < 4; i++)
        put_le32(out + 4 * i, st[i]);
}

/* Finish a message from where its state stands: `done` of its whole blocks
 * already hashed, or all of them and `tail_done` of its tail blocks. */
static void finish_scalar(uint32_t st[4], const message *m, size_t done, size_t tail_done,
                          unsigned char *out) {
    if (done < m->blocks)
        compress(st, m->data + 64 * done, m->blocks - done);
    compress(st, m->tail + 64 * tail_done, m->tail_blocks - tail_done);
    digest_out(st, out);
}

static void md5_scalar(size_t n, const unsigned char *const *ptrs, const size_t *lens,
                       unsigned char *out) {
    for (size_t i = 0; i < n; i++) {
        message m;
        uint32_t st[4] = {IV[0], IV[1], IV[2], IV[3]};
        message_init(&m, ptrs[i], lens[i]);
        finish_scalar(st, &m, 0, 0, out + 16 * i);
    }
}

/* ---- many streams: eight with AVX2, sixteen with AVX-512 ---- */

#ifdef WH_X86
#define LANES 16 /* at most */

typedef struct {
    message m;
    size_t job;      /* which buffer; (size_t)-1 if the lane is idle */
    size_t done;     /* whole blocks hashed */
    size_t tail_done;
} lane;

#define AVX2 __attribute__((target("avx2")))

#define VF(x, y, z) _mm256_xor_si256(z, _mm256_and_si256(x, _mm256_xor_si256(y, z)))
#define VG(x, y, z) _mm256_xor_si256(y, _mm256_and_si256(z, _mm256_xor_si256(x, y)))
#define VH(x, y, z) _mm256_xor_si256(_mm256_xor_si256(x, y), z)
#define VI(x, y, z) _mm256_xor_si256(y, _mm256_or_si256(x, _mm256_xor_si256(z, ones)))
#define F VF
#define G VG
#define H VH
#define I VI
#define STEP(f, a, b, c, d, k, s, t)                                                       \
    do {                                                                                   \
        __m256i sum_ = _mm256_add_epi32(                                                   \
            _mm256_add_epi32(a, f(b, c, d)),                                               \
            _mm256_add_epi32(X[k], _mm256_set1_epi32((int)(t))));                          \
        a = _mm256_add_epi32(b, _mm256_or_si256(_mm256_slli_epi32(sum_, s),                \
                                                _mm256_srli_epi32(sum_, 32 - (s))));       \
    } while (0)

/* Words 0-7 (or 8-15) of the eight lanes' blocks, one register per word. */
AVX2 static inline void transpose8(__m256i r[8], __m256i out[8]) {
    __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
    __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    out[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
    out[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
    out[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
    out[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
    out[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
    out[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
    out[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
    out[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

/* `count` blocks in each of lanes 0-7: lane i's k-th at p[i] + k * stride[i];
 * st[w][i] is word w of lane i's state. */
AVX2 static void compress8(uint32_t st[4][LANES], const unsigned char *const p[LANES],
                           const size_t stride[LANES], size_t count) {
    const __m256i ones = _mm256_set1_epi32(-1);
    __m256i a0 = _mm256_loadu_si256((const __m256i *)st[0]);
    __m256i b0 = _mm256_loadu_si256((const __m256i *)st[1]);
    __m256i c0 = _mm256_loadu_si256((const __m256i *)st[2]);
    __m256i d0 = _mm256_loadu_si256((const __m256i *)st[3]);
    for (size_t n = 0; n < count; n++) {
        __m256i r[8], X[16];
        for (int i = 0; i < 8; i++)
            r[i] = _mm256_loadu_si256((const __m256i *)(p[i] + stride[i] * n));
        transpose8(r, X);
        for (int i = 0; i < 8; i++)
            r[i] = _mm256_loadu_si256((const __m256i *)(p[i] + stride[i] * n + 32));
        transpose8(r, X + 8);
        __m256i a = a0, b = b0, c = c0, d = d0;
        MD5_ROUNDS(STEP);
        a0 = _mm256_add_epi32(a0, a);
        b0 = _mm256_add_epi32(b0, b);
        c0 = _mm256_add_epi32(c0, c);
        d0 = _mm256_add_epi32(d0, d);
    }
    _mm256_storeu_si256((__m256i *)st[0], a0);
    _mm256_storeu_si256((__m256i *)st[1], b0);
    _mm256_storeu_si256((__m256i *)st[2], c0);
    _mm256_storeu_si256((__m256i *)st[3], d0);
}

#undef F
#undef G
#undef H
#undef I
#undef STEP

/* The same with sixteen lanes: AVX-512 has a rotate and any three-input
 * logic function as one instruction each. */
#define AVX512 __attribute__((target("avx2,avx512f")))
#define F(x, y, z) _mm512_ternarylogic_epi32(x, y, z, 0xca)
#define G(x, y, z) _mm512_ternarylogic_epi32(x, y, z, 0xe4)
#define H(x, y, z) _mm512_ternarylogic_epi32(x, y, z, 0x96)
#define I(x, y, z) _mm512_ternarylogic_epi32(x, y, z, 0x39)
#define STEP(f, a, b, c, d, k, s, t)                                                       \
    a = _mm512_add_epi32(                                                                  \
        b, _mm512_rol_epi32(_mm512_add_epi32(_mm512_add_epi32(a, f(b, c, d)),              \
                                             _mm512_add_epi32(X[k], _mm512_set1_epi32((int)(t)))), \
                            s))

AVX512 static void compress16(uint32_t st[4][LANES], const unsigned char *const p[LANES],
                              const size_t stride[LANES], size_t count) {
    __m512i a0 = _mm512_loadu_si512(st[0]), b0 = _mm512_loadu_si512(st[1]);
    __m512i c0 = _mm512_loadu_si512(st[2]), d0 = _mm512_loadu_si512(st[3]);
    for (size_t n = 0; n < count; n++) {
        __m256i r[8], lo[8], hi[8];
        __m512i X[16];
        for (int half = 0; half < 2; half++) {
            for (int i = 0; i < 8; i++)
                r[i] = _mm256_loadu_si256((const __m256i *)(p[i] + stride[i] * n + 32 * half));
            transpose8(r, lo);
            for (int i = 0; i < 8; i++)
                r[i] = _mm256_loadu_si256(
                    (const __m256i *)(p[8 + i] + stride[8 + i] * n + 32 * half));
            transpose8(r, hi);
            for (int w = 0; w < 8; w++)
                X[8 * half + w] = _mm512_inserti64x4(_mm512_castsi256_si512(lo[w]), hi[w], 1);
        }
        __m512i a = a0, b = b0, c = c0, d = d0;
        MD5_ROUNDS(STEP);
        a0 = _mm512_add_epi32(a0, a);
        b0 = _mm512_add_epi32(b0, b);
        c0 = _mm512_add_epi32(c0, c);
        d0 = _mm512_add_epi32(d0, d);
    }
    _mm512_storeu_si512(st[0], a0);
    _mm512_storeu_si512(st[1], b0);
    _mm512_storeu_si512(st[2], c0);
    _mm512_storeu_si512(st[3], d0);
}

#undef F
#undef G
#undef H
#undef I
#undef STEP

/* Where a lane's next blocks are, and how many follow there in a row. */
static const unsigned char *lane_next(const lane *l, size_t *run) {
    if (l->done < l->m.blocks) {
        *run = l->m.blocks - l->done;
        return l->m.data + 64 * l->done;
    }
    *run = l->m.tail_blocks - l->tail_done;
    return l->m.tail + 64 * l->tail_done;
}

static void lane_advance(lane *l, size_t count) {
    if (l->done < l->m.blocks)
        l->done += count;
    else
        l->tail_done += count;
}

typedef void (*compress_lanes)(uint32_t st[4][LANES], const unsigned char *const p[LANES],
                               const size_t stride[LANES], size_t count);

/* Hash the buffers `width` at a time with `compress`. */
static void md5_lanes(size_t n, const unsigned char *const *ptrs, const size_t *lens,
                      unsigned char *out, int width, compress_lanes compress) {
    static const unsigned char idle_block[64];
    lane lanes[LANES];
    uint32_t st[4][LANES]; /* word w of lane i at st[w][i] */
    size_t next = 0, active = 0;
    for (int i = 0; i < LANES; i++) {
        lanes[i].job = (size_t)-1;
        if (i >= width) {
            for (int w = 0; w < 4; w++)
                st[w][i] = IV[w];
            continue;
        }
        if (next < n) {
            lanes[i].job = next;
            message_init(&lanes[i].m, ptrs[next], lens[next]);
            lanes[i].done = lanes[i].tail_done = 0;
            next++;
            active++;
        }
        for (int w = 0; w < 4; w++)
            st[w][i] = IV[w];
    }
    /* Few lanes busy: SIMD passes would mostly hash idle lanes. */
    while (active > (size_t)width / 4) {
        const unsigned char *p[LANES];
        size_t stride[LANES];
        size_t run = (size_t)-1;
        for (int i = 0; i < width; i++) {
            size_t r;
            if (lanes[i].job == (size_t)-1) { /* hashes one block over and over, unused */
                p[i] = idle_block;
                stride[i] = 0;
                continue;
            }
            stride[i] = 64;
            p[i] = lane_next(&lanes[i], &r);
            if (r < run)
                run = r;
        }
        compress(st, p, stride, run);
        for (int i = 0; i < width; i++) {
            lane *l = &lanes[i];
            if (l->job == (size_t)-1)
                continue;
            lane_advance(l, run);
            if (l->done < l->m.blocks || l->tail_done < l->m.tail_blocks)
                continue;
            uint32_t s[4] = {st[0][i], st[1][i], st[2][i], st[3][i]};
            digest_out(s, out + 16 * l->job);
            for (int w = 0; w < 4; w++)
                st[w][i] = IV[w];
            if (next < n) {
                l->job = next;
                message_init(&l->m, ptrs[next], lens[next]);
                l->done = l->tail_done = 0;
                next++;
            } else {
                l->job = (size_t)-1;
                active--;
            }
        }
    }
    for (int i = 0; i < LANES; i++) {
        lane *l = &lanes[i];
        if (l->job == (size_t)-1)
            continue;
        uint32_t s[4] = {st[0][i], st[1][i], st[2][i], st[3][i]};
        finish_scalar(s, &l->m, l->done, l->tail_done, out + 16 * l->job);
    }
    md5_scalar(n - next, ptrs + next, lens + next, out + 16 * next);
}
#endif

int wh_md5_lanes(void) {
#ifdef WH_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return 16;
    if (__builtin_cpu_supports("avx2"))
        return 8;
#endif
    return 1;
}

/* As wh_md5_many with at most `width` lanes (1, 8 or 16; fewer if the CPU
 * lacks them): each path can be checked against the others. */
void wh_md5_many_width(int width, size_t n, const unsigned char *const *ptrs, const size_t *lens,
                       unsigned char *out) {
#ifdef WH_X86
    int lanes = wh_md5_lanes();
    if (width >= 16 && lanes == 16) {
        md5_lanes(n, ptrs, lens, out, 16, compress16);
        return;
    }
    if (width >= 8 && lanes >= 8) {
        md5_lanes(n, ptrs, lens, out, 8, compress8);
        return;
    }
#endif
    (void)width;
    md5_scalar(n, ptrs, lens, out);
}

void wh_md5_many(size_t n, const unsigned char *const *ptrs, const size_t *lens,
                 unsigned char *out) {
#ifdef WH_X86
    static int lanes;
    if (!lanes)
        lanes = wh_md5_lanes();
    if (lanes == 16 && n > 4) {
        md5_lanes(n, ptrs, lens, out, 16, compress16);
        return;
    }
    if (lanes >= 8 && n > 2) {
        md5_lanes(n, ptrs, lens, out, 8, compress8);
        return;
    }
#endif
    md5_scalar(n, ptrs, lens, out);
}

/* Block files mapped and checked in one call, for a reader that holds a lock
 * between its own calls (Python's GIL, released by a ctypes call): opening,
 * mapping and faulting in each file one at a time from Python gives the lock
 * up and takes it back four times a block, each time behind whichever
 * thread took it meanwhile.
 *
 * wh_map_md5(n, paths, sizes, addrs, out): each file at paths[i] is mapped
 * read-only, its pages faulted in ahead (a read error shows here, not as a
 * SIGBUS later), then the mapped ones are hashed side by side (digest of
 * file i at out + 16 * i). addrs[i] is the mapping, to be unmapped with
 * wh_unmap(addrs[i], sizes[i]), or NULL if the file could not be opened, is
 * not sizes[i] bytes (or is empty), or could not be mapped and faulted in:
 * its digest is then left as it was. Returns -1 if no memory was to be had
 * for the call (nothing mapped), else how many files were mapped. */
#if defined(__linux__)
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; older kernels refuse it: nothing is mapped */
#endif

static void *map_file(const char *path, size_t size) {
    if (!size)
        return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size == size && st.st_size > 0)
        p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
    if (madvise(p, size, MADV_POPULATE_READ) != 0) {
        munmap(p, size);
        return NULL;
    }
    return p;
}

int wh_map_md5(size_t n, const char *const *paths, const size_t *sizes, void **addrs,
               unsigned char *out) {
    const unsigned char **ptrs = malloc((n ? n : 1) * sizeof *ptrs);
    size_t *lens = malloc((n ? n : 1) * sizeof *lens);
    size_t *which = malloc((n ? n : 1) * sizeof *which);
    unsigned char *sums = malloc((n ? n : 1) * 16);
    int mapped = -1;
    if (ptrs && lens && which && sums) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            addrs[i] = map_file(paths[i], sizes[i]);
            if (addrs[i]) {
                ptrs[m] = addrs[i];
                lens[m] = sizes[i];
                which[m++] = i;
            }
        }
        wh_md5_many(m, ptrs, lens, sums);
        for (size_t k = 0; k < m; k++)
            memcpy(out + 16 * which[k], sums + 16 * k, 16);
        mapped = (int)m;
    }
    free(ptrs);
    free(lens);
    free(which);
    free(sums);
    return mapped;
}

void wh_unmap(void *addr, size_t size) {
    if (addr)
        munmap(addr, size);
}

/* Read len bytes at off; 0 on a short read or an error. */
static int read_fully(int fd, unsigned char *buf, size_t len, uint64_t off) {
    while (len) {
        ssize_t got = pread(fd, buf, len, (off_t)off);
        if (got <= 0)
            return 0; /* an error, or the file is shorter than it should be */
        buf += got;
        len -= (size_t)got;
        off += (uint64_t)got;
    }
    return 1;
}

/* ---- files read a piece at a time, hashed side by side ---- */

/* Bytes read from each file per pass: what is held is a piece per lane,
 * never a whole block (a one-pass get maps a block only as it writes it). */
#define FD_PIECE (256u << 10)

/* The padded tail of a message of `size` bytes whose last `rest` bytes are
 * at `last`: one or two blocks in tail, their count returned. */
static size_t pad_tail(unsigned char tail[128], const unsigned char *last, size_t rest,
                       uint64_t size) {
    uint64_t bits = size * 8u;
    size_t blocks = rest < 56 ? 1 : 2;
    memset(tail, 0, 128);
    if (rest)
        memcpy(tail, last, rest);
    tail[rest] = 0x80;
    for (int i = 0; i < 8; i++)
        tail[blocks * 64 - 8 + i] = (unsigned char)(bits >> (8 * i));
    return blocks;
}

/* One file on its own: the plain code, a piece at a time. */
static int md5_fd_scalar(int fd, uint64_t size, uint64_t from, uint32_t st[4],
                         unsigned char *buf, unsigned char *out) {
    uint64_t whole = size - size % 64;
    unsigned char tail[128];
    for (uint64_t off = from; off < whole;) {
        size_t len = whole - off < FD_PIECE ? (size_t)(whole - off) : FD_PIECE;
        if (!read_fully(fd, buf, len, off))
            return 0;
        compress(st, buf, len / 64);
        off += len;
    }
    if (size % 64 && !read_fully(fd, buf, size % 64, whole))
        return 0;
    compress(st, tail, pad_tail(tail, buf, size % 64, size));
    digest_out(st, out);
    return 1;
}

/* wh_md5_fds(n, fds, sizes, out, ok): the MD5 of the first sizes[i] bytes
 * of each open file fds[i], read a piece (FD_PIECE) at a time and hashed
 * side by side as wh_md5_many hashes buffers; digest i at out + 16 * i and
 * ok[i] = 1, or ok[i] = 0 if the file could not be read that far (its error
 * is for the caller's own read to report). Returns -1 if no memory was to
 * be had for the call (nothing hashed), else 0. For a one-pass reader of
 * big blocks: a lane's piece, not the block, is what it holds. */
int wh_md5_fds(size_t n, const int *fds, const uint64_t *sizes, unsigned char *out, int *ok) {
    int width = 1;
#ifdef WH_X86
    int have = wh_md5_lanes();
    if (have == 16 && n > 4)
        width = 16;
    else if (have >= 8 && n > 2)
        width = 8;
#endif
    unsigned char *bufs = malloc((size_t)width * FD_PIECE);
    if (!bufs)
        return -1;
    for (size_t i = 0; i < n; i++) {
        ok[i] = 0;
        posix_fadvise(fds[i], 0, (off_t)sizes[i], POSIX_FADV_SEQUENTIAL);
    }
    size_t next = 0;
#ifdef WH_X86
    compress_lanes lanes_fn = width == 16 ? compress16 : compress8;
    while (width > 1 && n - next > (size_t)width / 4) {
        /* A group of files, a lane each; lanes left over hash an idle block. */
        static const unsigned char idle_block[64];
        uint32_t st[4][LANES];
        size_t job[LANES];
        uint64_t off[LANES], whole[LANES];
        size_t have_bytes[LANES], used[LANES];
        int live[LANES];
        size_t group = n - next < (size_t)width ? n - next : (size_t)width;
        for (int i = 0; i < LANES; i++) {
            for (int w = 0; w < 4; w++)
                st[w][i] = IV[w];
            live[i] = 0;
            if ((size_t)i < group) {
                job[i] = next + (size_t)i;
                off[i] = 0;
                whole[i] = sizes[job[i]] - sizes[job[i]] % 64;
                have_bytes[i] = used[i] = 0;
                live[i] = 1;
            }
        }
        next += group;
        size_t busy = group;
        while (busy > (size_t)width / 4) {
            const unsigned char *p[LANES];
            size_t stride[LANES];
            size_t run = (size_t)-1;
            for (int i = 0; i < width; i++) {
                if (live[i] && used[i] == have_bytes[i]) {
                    if (off[i] == whole[i]) { /* its whole blocks hashed: the tail alone */
                        uint32_t s[4] = {st[0][i], st[1][i], st[2][i], st[3][i]};
                        unsigned char *buf = bufs + (size_t)i * FD_PIECE;
                        ok[job[i]] = md5_fd_scalar(fds[job[i]], sizes[job[i]], whole[i], s, buf,
                                                   out + 16 * job[i]);
                        live[i] = 0;
                        busy--;
                    } else {
                        uint64_t left = whole[i] - off[i];
                        size_t len = left < FD_PIECE ? (size_t)left : FD_PIECE;
                        if (!read_fully(fds[job[i]], bufs + (size_t)i * FD_PIECE, len, off[i])) {
                            live[i] = 0;
                            busy--;
                        } else {
                            off[i] += len;
                            have_bytes[i] = len;
                            used[i] = 0;
                        }
                    }
                }
                if (!live[i]) {
                    p[i] = idle_block;
                    stride[i] = 0;
                    continue;
                }
                p[i] = bufs + (size_t)i * FD_PIECE + used[i];
                stride[i] = 64;
                size_t r = (have_bytes[i] - used[i]) / 64;
                if (r < run)
                    run = r;
            }
            if (busy <= (size_t)width / 4 || run == (size_t)-1)
                break;
            lanes_fn(st, p, stride, run);
            for (int i = 0; i < width; i++)
                if (live[i])
                    used[i] += 64 * run;
        }
        /* Few lanes left: each finishes on its own, from where it stands. */
        for (int i = 0; i < width; i++) {
            if (!live[i])
                continue;
            uint32_t s[4] = {st[0][i], st[1][i], st[2][i], st[3][i]};
            unsigned char *buf = bufs + (size_t)i * FD_PIECE;
            if (used[i] < have_bytes[i])
                compress(s, buf + used[i], (have_bytes[i] - used[i]) / 64);
            ok[job[i]] = md5_fd_scalar(fds[job[i]], sizes[job[i]], off[i], s, buf,
                                       out + 16 * job[i]);
        }
    }
#endif
    for (; next < n; next++) {
        uint32_t st[4] = {IV[0], IV[1], IV[2], IV[3]};
        ok[next] = md5_fd_scalar(fds[next], sizes[next], 0, st, bufs, out + 16 * next);
    }
    free(bufs);
    return 0;
}
#endif
