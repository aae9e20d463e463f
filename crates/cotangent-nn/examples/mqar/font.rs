//! A built-in 5×7 pixel font, drawn as filled squares, so the plot needs no font file.
//!
//! Each glyph is a `u64` of 8 rows, the top row in the highest byte; bit 4 of a row is the left
//! column. Rows 0–6 hold capitals and digits, row 7 the descenders of g, j, p, q, y.
use plotters::coord::Shift;
use plotters::prelude::*;

#[rustfmt::skip]
const GLYPHS: &[(char, u64)] = &[
    ('0', 0x0E11131519110E00), ('1', 0x040C040404040E00), ('2', 0x0E11010204081F00),
    ('3', 0x1F02040201110E00), ('4', 0x02060A121F020200), ('5', 0x1F101E0101110E00),
    ('6', 0x0608101E11110E00), ('7', 0x1F01020408080800), ('8', 0x0E11110E11110E00),
    ('9', 0x0E11110F01020C00),
    ('A', 0x0E1111111F111100), ('B', 0x1E11111E11111E00), ('C', 0x0E11101010110E00),
    ('D', 0x1C12111111121C00), ('E', 0x1F10101E10101F00), ('F', 0x1F10101E10101000),
    ('G', 0x0E11101711110F00), ('H', 0x1111111F11111100), ('I', 0x0E04040404040E00),
    ('J', 0x0702020202120C00), ('K', 0x1112141814121100), ('L', 0x1010101010101F00),
    ('M', 0x111B151511111100), ('N', 0x1111191513111100), ('O', 0x0E11111111110E00),
    ('P', 0x1E11111E10101000), ('Q', 0x0E11111115120D00), ('R', 0x1E11111E14121100),
    ('S', 0x0F10100E01011E00), ('T', 0x1F04040404040400), ('U', 0x1111111111110E00),
    ('V', 0x11111111110A0400), ('W', 0x1111111515150A00), ('X', 0x11110A040A111100),
    ('Y', 0x1111110A04040400), ('Z', 0x1F01020408101F00),
    ('a', 0x00000E010F110F00), ('b', 0x1010161911111E00), ('c', 0x00000E1010110E00),
    ('d', 0x01010D1311110F00), ('e', 0x00000E111F100E00), ('f', 0x0609081C08080800),
    ('g', 0x00000F11110F010E), ('h', 0x1010161911111100), ('i', 0x04000C0404040E00),
    ('j', 0x020006020202120C), ('k', 0x1010121418141200), ('l', 0x0C04040404040E00),
    ('m', 0x00001A1515111100), ('n', 0x0000161911111100), ('o', 0x00000E1111110E00),
    ('p', 0x00001E11111E1010), ('q', 0x00000F11110F0101), ('r', 0x0000161910101000),
    ('s', 0x00000E100E011E00), ('t', 0x08081C0808090600), ('u', 0x0000111111130D00),
    ('v', 0x00001111110A0400), ('w', 0x0000111115150A00), ('x', 0x0000110A040A1100),
    ('y', 0x00001111110F010E), ('z', 0x00001F0204081F00),
    (' ', 0), ('.', 0x00000000000C0C00), (',', 0x00000000000C0408),
    ('%', 0x1819020408130300), ('-', 0x0000001F00000000), ('+', 0x0004041F04040000),
    (':', 0x000C0C000C0C0000), (';', 0x000C0C000C040800), ('(', 0x0204080808040200),
    (')', 0x0804020202040800), ('/', 0x0001020408100000), ('=', 0x00001F001F000000),
    ('_', 0x0000000000001F00), ('\'', 0x0C04080000000000), ('?', 0x0E11010204000400),
    ('!', 0x0404040404000400), ('*', 0x0004150E15040000), ('<', 0x0204081008040200),
    ('>', 0x0804020102040800), ('[', 0x0E08080808080E00), (']', 0x0E02020202020E00),
];

/// Pixels from one character to the next (5 columns and a gap), at scale 1.
pub const ADVANCE: i32 = 6;
/// Height of capitals and digits, at scale 1.
pub const HEIGHT: i32 = 7;

fn glyph(c: char) -> u64 {
    // unknown characters show as a hollow box
    GLYPHS.iter().find(|g| g.0 == c).map_or(0x1F11111111111F00, |g| g.1)
}

/// Width of `s` in pixels at `scale`.
pub fn width(s: &str, scale: i32) -> i32 {
    (s.chars().count() as i32 * ADVANCE - 1).max(0) * scale
}

/// Draws `s` with each font pixel a `scale`×`scale` square. `(x, y)` is the point at fraction
/// `anchor` of the text box: `(0.0, 0.0)` its top-left corner, `(0.5, 0.5)` its centre, `(1.0,
/// 0.5)` the middle of its right edge. With `up`, the text runs bottom to top (for a y axis),
/// and `anchor` is taken along the reading direction as before.
pub fn text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    s: &str,
    (x, y): (i32, i32),
    scale: i32,
    anchor: (f64, f64),
    up: bool,
    color: &RGBColor,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (w, h) = (width(s, scale), HEIGHT * scale);
    let (dx, dy) = ((anchor.0 * w as f64).round() as i32, (anchor.1 * h as f64).round() as i32);
    for (i, c) in s.chars().enumerate() {
        let bits = glyph(c);
        for row in 0..8 {
            for col in 0..5 {
                if bits >> (8 * (7 - row) + (4 - col)) & 1 == 0 {
                    continue;
                }
                // position of the pixel in the unrotated text box
                let (tx, ty) = ((i as i32 * ADVANCE + col) * scale - dx, row * scale - dy);
                let (px, py) = if up { (x + ty, y - tx - scale) } else { (x + tx, y + ty) };
                area.draw(&Rectangle::new([(px, py), (px + scale, py + scale)], color.filled()))?;
            }
        }
    }
    Ok(())
}
