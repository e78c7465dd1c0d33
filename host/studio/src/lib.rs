//! The studio page's linter: [`bl_pages::studio_report`] (which is
//! `bl graph lint` and the drawing) and [`bl_pages::studio_yaml`] behind a
//! small C-style interface the page's script calls. The script copies the
//! manifest's UTF-8 into memory from [`bl_alloc`], calls a function, and
//! reads that many bytes of UTF-8 JSON or YAML from [`bl_result`].

use std::sync::Mutex;

use bl_graph::Format;

/// The last answer, kept until the next call so the script can read it.
static RESULT: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// The last graph's layout, reused while keystrokes leave its shape alone.
static LAYOUT: Mutex<Option<bl_pages::LayoutCache>> = Mutex::new(None);

/// `len` bytes for the script to write its input into; the next call
/// takes them back.
#[unsafe(no_mangle)]
pub extern "C" fn bl_alloc(len: usize) -> *mut u8 {
    Box::into_raw(vec![0u8; len].into_boxed_slice()).cast()
}

/// Where the last answer starts.
#[unsafe(no_mangle)]
pub extern "C" fn bl_result() -> *const u8 {
    RESULT.lock().map_or(std::ptr::null(), |r| r.as_ptr())
}

/// The studio's report on the manifest at `ptr` (`format` 1 for JSON, else
/// YAML), as JSON; returns its length.
///
/// # Safety
/// `ptr` and `len` must come from one [`bl_alloc`] call, not yet passed here.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bl_studio_lint(ptr: *mut u8, len: usize, format: u32) -> usize {
    // SAFETY: the caller passes what bl_alloc returned, once.
    let text = unsafe { take(ptr, len) };
    let mut cache = LAYOUT.lock().unwrap_or_else(|e| e.into_inner());
    let report =
        bl_pages::studio_report_cached(&text, format_of(format), cache.get_or_insert_default());
    answer(report.to_string().into_bytes())
}

/// [`bl_studio_lint`] for the page, which shows the drawing numbered
/// `shown` (0: none): the report's `svg` is null while the drawing is
/// still that one (see [`bl_pages::studio_report_since`]).
///
/// # Safety
/// As for [`bl_studio_lint`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bl_studio_lint_shown(
    ptr: *mut u8,
    len: usize,
    format: u32,
    shown: u32,
) -> usize {
    // SAFETY: the caller passes what bl_alloc returned, once.
    let text = unsafe { take(ptr, len) };
    let mut cache = LAYOUT.lock().unwrap_or_else(|e| e.into_inner());
    let report = bl_pages::studio_report_since(
        &text,
        format_of(format),
        cache.get_or_insert_default(),
        (shown != 0).then_some(shown),
    );
    answer(report.to_string().into_bytes())
}

/// The manifest as YAML, or an empty answer when it does not parse.
///
/// # Safety
/// As for [`bl_studio_lint`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bl_studio_yaml(ptr: *mut u8, len: usize, format: u32) -> usize {
    // SAFETY: the caller passes what bl_alloc returned, once.
    let text = unsafe { take(ptr, len) };
    answer(
        bl_pages::studio_yaml(&text, format_of(format))
            .unwrap_or_default()
            .into_bytes(),
    )
}

/// Takes back what [`bl_alloc`] gave, as text (invalid UTF-8 replaced:
/// the page only ever writes what TextEncoder made).
unsafe fn take(ptr: *mut u8, len: usize) -> String {
    // SAFETY: ptr and len are one bl_alloc allocation, owned again here.
    let bytes = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) };
    String::from_utf8_lossy(&bytes).into_owned()
}

fn format_of(format: u32) -> Format {
    if format == 1 {
        Format::Json
    } else {
        Format::Yaml
    }
}

fn answer(bytes: Vec<u8>) -> usize {
    let len = bytes.len();
    if let Ok(mut result) = RESULT.lock() {
        *result = bytes;
    }
    len
}
