/* Reference point for Benchmarks/compare.sh: OpenSSL's own PKCS#7 verification of the same
 * receipt bytes, in a loop, one core. Each iteration parses (d2i_PKCS7) and verifies
 * (PKCS7_verify: signature + chain to the given root at the given time), as a server would.
 *
 * usage: pkcs7_verify RECEIPT.der ROOT.(der|pem) EPOCH_SECONDS SECONDS
 * prints: pkcs7_verify: N/s   (exit 1 if the receipt does not verify)
 */
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/pkcs7.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static unsigned char *slurp(const char *path, long *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(*len);
    if (fread(buf, 1, *len, f) != (size_t)*len) { perror(path); exit(2); }
    fclose(f);
    return buf;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s RECEIPT ROOT EPOCH SECONDS\n", argv[0]); return 2; }
    long rlen, clen;
    unsigned char *receipt = slurp(argv[1], &rlen);
    unsigned char *rootbytes = slurp(argv[2], &clen);
    const unsigned char *p = rootbytes;
    X509 *root = d2i_X509(NULL, &p, clen);
    if (!root) {
        BIO *bio = BIO_new_mem_buf(rootbytes, (int)clen);
        root = PEM_read_bio_X509(bio, NULL, NULL, NULL);
        BIO_free(bio);
    }
    if (!root) { fprintf(stderr, "cannot read root\n"); return 2; }
    X509_STORE *store = X509_STORE_new();
    X509_STORE_add_cert(store, root);
    X509_VERIFY_PARAM *param = X509_STORE_get0_param(store);
    X509_VERIFY_PARAM_set_time(param, (time_t)atoll(argv[3]));
    X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_ANY);
    double seconds = atof(argv[4]);

    long count = 0;
    double start = now_seconds(), end = start + seconds;
    while (now_seconds() < end) {
        for (int i = 0; i < 16; i++) {
            const unsigned char *q = receipt;
            PKCS7 *p7 = d2i_PKCS7(NULL, &q, rlen);
            BIO *out = BIO_new(BIO_s_null());
            int ok = p7 && PKCS7_verify(p7, NULL, store, NULL, out, PKCS7_BINARY);
            BIO_free(out);
            PKCS7_free(p7);
            if (!ok) {
                ERR_print_errors_fp(stderr);
                return 1;
            }
            count++;
        }
    }
    printf("pkcs7_verify: %.0f/s\n", count / (now_seconds() - start));
    return 0;
}
