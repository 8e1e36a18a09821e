/* --plot: effective bandwidth of each memory-bound workload, fused and eager, as bars, with
 * the probe of its read/write mix as a dashed line across its group. Plain SVG, written here. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "bench.h"

enum { W = 960, H = 500, LEFT = 70, RIGHT = 20, TOP = 64, BOTTOM = 88 };

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A round grid step (1, 2 or 5 times a power of ten) giving about five lines up to top. */
static double grid_step(double top)
{
    double raw = top / 5, p = pow(10, floor(log10(raw)));
    double m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

static double gbps(double bytes, double ms) { return bytes / (ms * 1e6); }

static void axes(FILE *f, double top)
{
    double plot_h = H - TOP - BOTTOM, step = grid_step(top);
    for (double v = 0; v <= top * 1.0001; v += step) {
        double y = H - BOTTOM - v / top * plot_h;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", LEFT, y, W - RIGHT, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"12\">%g</text>\n", LEFT - 6, y + 4, v);
    }
    fprintf(f, "<text x=\"16\" y=\"%d\" font-size=\"13\" transform=\"rotate(-90 16 %d)\" text-anchor=\"middle\">"
               "effective GB/s</text>\n",
            TOP + (H - TOP - BOTTOM) / 2, TOP + (H - TOP - BOTTOM) / 2);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", LEFT, H - BOTTOM, W - RIGHT,
            H - BOTTOM);
}

static void bar(FILE *f, double x, double w, double v, double top, const char *fill)
{
    double plot_h = H - TOP - BOTTOM, h = v / top * plot_h;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", x, H - BOTTOM - h, w, h,
            fill);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\">%.1f</text>\n", x + w / 2,
            H - BOTTOM - h - 4, v);
}

static void group(FILE *f, const plot_bar *b, double x0, double gw, double top)
{
    const bench_bandwidth *bw = b->bw;
    double plot_h = H - TOP - BOTTOM, bw_w = gw * 0.3;
    bar(f, x0 + gw * 0.18, bw_w, gbps(bw->fused_bytes, bw->fused_ms), top, "#3b6fb6");
    bar(f, x0 + gw * 0.52, bw_w, gbps(bw->fused_bytes, bw->eager_ms), top, "#a0a0a0");
    double py = H - BOTTOM - bw->probe_gbps / top * plot_h;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c0392b\" stroke-width=\"2\" "
               "stroke-dasharray=\"6 4\"/>\n",
            x0 + gw * 0.08, py, x0 + gw * 0.92, py);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"13\">", x0 + gw / 2, H - BOTTOM + 20);
    xml_text(f, b->workload);
    fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555\">",
            x0 + gw / 2, H - BOTTOM + 36);
    xml_text(f, bw->size);
    fprintf(f, " f32</text>\n");
    /* the probe's figure goes under the axis: above its line it would cover the bar labels */
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\" fill=\"#c0392b\">probe ",
            x0 + gw / 2, H - BOTTOM + 52);
    xml_text(f, probe_mix_name(bw->probe));
    fprintf(f, " %.1f; fused %.2fx</text>\n", bw->probe_gbps, gbps(bw->fused_bytes, bw->fused_ms) / bw->probe_gbps);
}

static void legend(FILE *f)
{
    int x = W - RIGHT - 400, y = TOP - 22;
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#3b6fb6\"/>"
               "<text x=\"%d\" y=\"%d\" font-size=\"12\">fused</text>\n",
            x, y - 10, x + 16, y);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#a0a0a0\"/>"
               "<text x=\"%d\" y=\"%d\" font-size=\"12\">eager</text>\n",
            x + 70, y - 10, x + 86, y);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#c0392b\" stroke-width=\"2\" "
               "stroke-dasharray=\"6 4\"/><text x=\"%d\" y=\"%d\" font-size=\"12\">probe: same mix, same "
               "run</text>\n",
            x + 140, y - 4, x + 170, y - 4, x + 176, y);
}

int write_plot(const char *path, const char *title, const plot_bar *bars, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return bench_fail("cannot write %s: %s", path, strerror(errno));
    double top = 1;
    for (int i = 0; i < n; i++) {
        const bench_bandwidth *b = bars[i].bw;
        double v[3] = {gbps(b->fused_bytes, b->fused_ms), gbps(b->fused_bytes, b->eager_ms), b->probe_gbps};
        for (int k = 0; k < 3; k++)
            top = v[k] > top ? v[k] : top;
    }
    top = ceil(top * 1.12 / grid_step(top * 1.12)) * grid_step(top * 1.12);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H, W, H);
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"15\">", LEFT);
    xml_text(f, title);
    fprintf(f, "</text>\n");
    axes(f, top);
    legend(f);
    double gw = n ? (double)(W - LEFT - RIGHT) / n : 0;
    for (int i = 0; i < n; i++)
        group(f, &bars[i], LEFT + gw * i, gw, top);
    if (n == 0)
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"14\">no memory-bound workload ran</text>\n", LEFT + 20,
                H / 2);
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0)
        return bench_fail("writing %s failed: %s", path, strerror(errno));
    return 0;
}
