//! Small, valid test inputs that other crates' tests and the examples generator share.
#![doc(hidden)]

/// A minimal PDF: one page per content stream, Helvetica as /F1, correct xref table.
pub fn pdf_from_streams(contents: &[&str]) -> Vec<u8> {
    let n = contents.len();
    // Objects: 1 catalog, 2 pages, 3 font, then (page, content) pairs.
    let kids: Vec<String> = (0..n).map(|i| format!("{} 0 R", 4 + 2 * i)).collect();
    let mut objects = vec![
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        format!("<< /Type /Pages /Kids [{}] /Count {n} >>", kids.join(" ")),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
            .to_string(),
    ];
    for (i, content) in contents.iter().enumerate() {
        let content_id = 5 + 2 * i;
        objects.push(format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content_id} 0 R \
             /Resources << /Font << /F1 3 0 R >> >> >>"
        ));
        objects.push(format!(
            "<< /Length {} >>\nstream\n{content}\nendstream",
            content.len()
        ));
    }
    let mut pdf = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", i + 1).as_bytes());
    }
    let xref = pdf.len();
    let mut table = format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1);
    for off in offsets {
        table.push_str(&format!("{off:010} 00000 n \n"));
    }
    table.push_str(&format!(
        "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
        objects.len() + 1
    ));
    pdf.extend_from_slice(table.as_bytes());
    pdf
}

/// A PDF whose pages hold the given lines of text (ASCII; parentheses are escaped).
pub fn pdf_with_text(pages: &[&[&str]]) -> Vec<u8> {
    let streams: Vec<String> = pages
        .iter()
        .map(|lines| {
            let mut s = String::from("BT /F1 12 Tf 72 720 Td 14 TL");
            for l in lines.iter() {
                let esc = l
                    .replace('\\', "\\\\")
                    .replace('(', "\\(")
                    .replace(')', "\\)");
                s.push_str(&format!(" ({esc}) Tj T*"));
            }
            s.push_str(" ET");
            s
        })
        .collect();
    let refs: Vec<&str> = streams.iter().map(String::as_str).collect();
    pdf_from_streams(&refs)
}
