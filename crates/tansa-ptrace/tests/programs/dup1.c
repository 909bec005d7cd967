/*
 * Test target for `tansa retrace record --region` with two functions of one name: this
 * file's `static long dup(long)` and dup2.c's. Built by the tests with:
 *   cc -O1 -g -fno-inline -o dup dup1.c dup2.c
 */
__attribute__((noinline)) static long dup(long x) {
    return x + 1;
}

long call1(long x) {
    return dup(x);
}
