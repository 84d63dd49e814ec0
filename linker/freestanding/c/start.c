/* Freestanding entry point for the copyrpc link check.
 *
 * Linked with -nostdlib -ffreestanding -static against the no_std staticlib: if the Rust
 * side needed anything from std or libc, the link would fail with an undefined symbol.
 * The program calls the self-test, writes one line with a raw syscall and exits with its
 * result, so the check also proves the code runs (natively on x86_64, under qemu-aarch64
 * on aarch64). */
#include "copyrpc.h"

typedef unsigned long usize;

/* Rust-side checks of the core and the mlx5 layer; returns 0 or the failing check's number. */
extern unsigned int copyrpc_freestanding_selftest(void);

/* The C ABI itself, called from C: 90+ numbers so they do not collide with the Rust checks. */
static unsigned int c_abi_checks(void) {
    uint32_t imm = 0;
    if (copyrpc_padded_message_size(0) != 32) return 91;
    if (copyrpc_padded_message_size(21) != 64) return 92;
    if (copyrpc_encode_imm(96, &imm) != COPYRPC_OK || imm != 3) return 93;
    if (copyrpc_encode_imm(33, &imm) != COPYRPC_E_BAD_ARG || imm != 3) return 94;
    if (copyrpc_encode_imm(96, NULL) != COPYRPC_E_NULL) return 96;
    if (copyrpc_decode_imm(3) != 96) return 95;
    return 0;
}

static long sys3(long nr, long a, long b, long c) {
    long ret;
#if defined(__x86_64__)
    __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = nr;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
    ret = x0;
#else
#error "unsupported architecture"
#endif
    return ret;
}

#if defined(__x86_64__)
enum { SYS_WRITE = 1, SYS_EXIT = 60 };
#else
enum { SYS_WRITE = 64, SYS_EXIT = 93 };
#endif

static void put(const char *s) {
    usize n = 0;
    while (s[n]) n++;
    sys3(SYS_WRITE, 1, (long)s, (long)n);
}

void copyrpc_freestanding_abort(void) {
    put("freestanding copyrpc core: panicked\n");
    sys3(SYS_EXIT, 99, 0, 0);
    for (;;) {}
}

/* The kernel enters _start with the stack 16-byte aligned and no return address, which is
 * not the C calling convention (GCC may use aligned SSE stores on the stack), so a tiny
 * asm stub realigns and calls the C entry. */
__attribute__((used, noreturn)) void c_main(void);
#if defined(__x86_64__)
__asm__(".globl _start\n_start:\n\txor %rbp, %rbp\n\tand $-16, %rsp\n\tcall c_main\n\thlt\n");
#else
__asm__(".globl _start\n_start:\n\tmov x29, #0\n\tmov x30, #0\n\tbl c_main\n\tbrk #0\n");
#endif

void c_main(void) {
    unsigned int failed = copyrpc_freestanding_selftest();
    if (failed == 0) failed = c_abi_checks();
    if (failed == 0) {
        put("freestanding copyrpc core: ok\n");
    } else {
        char msg[] = "freestanding copyrpc core: check 00 failed\n";
        msg[33] = (char)('0' + (failed / 10) % 10);
        msg[34] = (char)('0' + failed % 10);
        put(msg);
    }
    sys3(SYS_EXIT, (long)failed, 0, 0);
    for (;;) {}
}
