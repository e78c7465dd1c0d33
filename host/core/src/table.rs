//! Plain-text tables, as bl prints them: columns padded to their widest
//! cell, a rule under the header.

/// Rows laid out in columns as wide as their widest cell (the last column
/// is left ragged), with a rule under the header.
pub fn table_lines<const N: usize>(rows: &[[String; N]]) -> Vec<String> {
    let mut widths = [0usize; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut lines = Vec::with_capacity(rows.len() + 1);
    for (i, row) in rows.iter().enumerate() {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == N {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[c]));
            }
        }
        lines.push(line.trim_end().to_string());
        if i == 0 {
            // The ragged last column may run long; the rule need not.
            let rule = widths[..N - 1].iter().map(|w| w + 2).sum::<usize>() + widths[N - 1].min(40);
            lines.push("-".repeat(rule));
        }
    }
    lines
}
