/*
 * A shared library for `tansa retrace record --region` tests: `shfn` lives here, not in
 * the program that calls it (shlib_main.c). Built by the tests with:
 *   cc -O1 -g -fno-inline -shared -fPIC -o libshlib.so shlib.c
 */
__attribute__((noinline)) int shfn(int x) {
    int r = 0;
    for (int i = 0; i < (x & 3); i++)
        r += i ^ x;
    return r;
}
