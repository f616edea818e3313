# plot_hitrate.awk — draw hit rate against cache capacity as an SVG, from a table.
#
# Input: tab-separated lines "blocks label infinite belady lru s3fifo arc admit chain
# chainarc tide_lru tide_s3fifo tide_chain adapt tide_adapt" (hit rates as fractions: eight
# simulated series, three measured through the store, adapt simulated and measured; label is
# the capacity's second name, e.g. "16 GiB"), capacities ascending. A store column left
# empty has no marker at that capacity (a trace measured through the store at some
# capacities only). A header line starting with '#' may carry the title after
# "# ". Output: an SVG on stdout with a log2 capacity axis, one line per simulated policy
# (the store's default, chain, drawn heavier) and markers for the store's measured figures.
# Plain SVG 1.1, no scripts, no external fonts.
#
#   awk -F'\t' -f scripts/plot_hitrate.awk table.tsv > bench/hitrate.svg

BEGIN {
    W = 800; H = 540; L = 70; R = 230; T = 50; B = 80
    n = 0; ymax = 0; title = "Block hit rate against capacity"
    FIRST = 3; LAST = 15
    name[3] = "infinite cache"; color[3] = "#888888"; dash[3] = "6,4"
    name[4] = "Belady (optimum)"; color[4] = "#000000"; dash[4] = ""
    name[5] = "LRU"; color[5] = "#1f77b4"; dash[5] = ""
    name[6] = "S3-FIFO, exact ghost"; color[6] = "#ff7f0e"; dash[6] = ""
    name[7] = "ARC"; color[7] = "#2ca02c"; dash[7] = ""
    name[8] = "reuse-count admission"; color[8] = "#9467bd"; dash[8] = "4,2"
    name[9] = "chain (the default)"; color[9] = "#d62728"; dash[9] = ""
    name[10] = "chain-ordered ARC"; color[10] = "#8c564b"; dash[10] = "4,2"
    name[11] = "store: lru"; color[11] = "#1f77b4"; mark[11] = "circle"
    name[12] = "store: s3fifo (hashed ghost)"; color[12] = "#ff7f0e"; mark[12] = "square"
    name[13] = "store: chain"; color[13] = "#d62728"; mark[13] = "diamond"
    name[14] = "adapt"; color[14] = "#e377c2"; dash[14] = ""
    name[15] = "store: adapt"; color[15] = "#e377c2"; mark[15] = "diamond"
    # legend order: the simulated lines, then the store's markers
    split("3 4 5 6 7 8 9 10 14 11 12 13 15", order, " ")
    for (k = 1; k <= 13; k++) slot[order[k] + 0] = k - 1 + (k >= 10 ? 1 : 0)
}

/^#/ { sub(/^# */, ""); if ($0 != "") title = $0; next }
NF >= LAST {
    n++
    blocks[n] = $1; label[n] = $2
    for (c = FIRST; c <= LAST; c++) {
        v[n, c] = $c + 0
        has[n, c] = $c != ""
        if (v[n, c] > ymax) ymax = v[n, c]
    }
}

function xof(b) { return L + (log(b) - lo) / (hi - lo) * (W - L - R) }
function yof(r) { return T + (1 - r / ytop) * (H - T - B) }
function esc(s) { gsub(/&/, "\\&amp;", s); gsub(/</, "\\&lt;", s); return s }
function marker(kind, x, y, col) {
    if (kind == "circle")
        printf "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"white\" stroke=\"%s\" stroke-width=\"2\"/>\n", x, y, col
    else if (kind == "square")
        printf "<rect x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" fill=\"white\" stroke=\"%s\" stroke-width=\"2\"/>\n", x - 3.5, y - 3.5, col
    else
        printf "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"%s\"/>\n", x, y - 5, x + 5, y, x, y + 5, x - 5, y, col
}

END {
    if (n < 2) { print "plot_hitrate.awk: need at least two capacities" > "/dev/stderr"; exit 1 }
    lo = log(blocks[1]); hi = log(blocks[n])
    if (hi <= lo) hi = lo + 1
    ytop = int(ymax * 10 + 0.999) / 10
    if (ytop <= 0) ytop = 1
    printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" ", W, H
    printf "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H
    printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
    printf "<text x=\"%d\" y=\"28\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", L, esc(title)
    # horizontal grid and y labels every 10%
    for (g = 0; g <= ytop + 1e-9; g += 0.1) {
        y = yof(g)
        printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", L, y, W - R, y
        printf "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%d%%</text>\n", L - 8, y + 4, g * 100 + 0.5
    }
    # vertical grid and x labels at each capacity
    for (i = 1; i <= n; i++) {
        x = xof(blocks[i])
        printf "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#f0f0f0\"/>\n", x, T, x, H - B
        printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x, H - B + 16, blocks[i]
        printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#666\">%s</text>\n", x, H - B + 31, esc(label[i])
    }
    printf "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n", L, T, W - L - R, H - T - B
    printf "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">capacity in blocks (and at llama-3-8b bf16, 64 MiB a block)</text>\n", L + (W - L - R) / 2, H - 22
    printf "<text transform=\"translate(18,%d) rotate(-90)\" text-anchor=\"middle\">block hit rate</text>\n", T + (H - T - B) / 2
    printf "<text x=\"%d\" y=\"%d\" fill=\"#444\">simulated (tide analyze)</text>\n", W - R + 16, T + 2
    # one polyline per simulated series, markers for the store's measured ones
    for (c = FIRST; c <= LAST; c++) {
        ly = T + 22 + slot[c] * 22; lx = W - R + 16
        if (c == 11) printf "<text x=\"%d\" y=\"%d\" fill=\"#444\">through the store (tide replay)</text>\n", lx, ly - 18
        if (mark[c] == "") {
            pts = ""
            for (i = 1; i <= n; i++) pts = pts sprintf("%.1f,%.1f ", xof(blocks[i]), yof(v[i, c]))
            width = (c == 4 || c == 9 || c == 14) ? 2.5 : 1.6
            printf "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"", color[c], width
            if (dash[c] != "") printf " stroke-dasharray=\"%s\"", dash[c]
            printf " points=\"%s\"/>\n", pts
            printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"%s\"", lx, ly, lx + 28, ly, color[c], width
            if (dash[c] != "") printf " stroke-dasharray=\"%s\"", dash[c]
            printf "/>\n"
        } else {
            for (i = 1; i <= n; i++)
                if (has[i, c]) marker(mark[c], xof(blocks[i]), yof(v[i, c]), color[c])
            marker(mark[c], lx + 14, ly, color[c])
        }
        printf "<text x=\"%d\" y=\"%d\">%s</text>\n", lx + 36, ly + 4, esc(name[c])
    }
    printf "</svg>\n"
}
