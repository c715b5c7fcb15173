//! Plain tables as kubectl prints them: columns padded to their widest cell, three spaces
//! apart, the last column unpadded.

/// `rows[0]` is the header.
pub fn render(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|j| {
            rows.iter()
                .map(|r| r.get(j).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(j, c)| {
                if j + 1 == r.len() {
                    c.clone()
                } else {
                    format!("{c:<w$}", w = widths[j])
                }
            })
            .collect();
        out.push_str(&cells.join("   "));
        out.push('\n');
    }
    out
}
