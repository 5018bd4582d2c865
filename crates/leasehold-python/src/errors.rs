//! The exceptions of the `leasehold` package, and leasehold's errors as
//! them.
//!
//! Every exception is a `leasehold.Error`. Two are also Python's own, so
//! that code written against the standard library catches them:
//! `Timeout` is a `TimeoutError` (as `asyncio.wait_for`'s and
//! `threading.Lock.acquire`'s callers expect) and `UsageError` a
//! `ValueError` (a bad value: a duration, key, URL or size; a wrong *type*
//! is a plain `TypeError`, raised by the Python half before any call
//! here). `create_exception!` makes classes of one base only, so those two
//! are made by `type(name, bases, dict)` when the module is loaded.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

create_exception!(
    _leasehold,
    Error,
    PyException,
    "Every error leasehold raises."
);
create_exception!(
    _leasehold,
    LeaseLost,
    Error,
    "The lease is lost: it expired before it could be renewed, was broken, or taken over."
);
create_exception!(
    _leasehold,
    StoreError,
    Error,
    "The store failed, does not exist, or grants nothing yet (quarantine)."
);

/// `Timeout(Error, TimeoutError)`, made when the module is loaded.
static TIMEOUT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
/// `UsageError(Error, ValueError)`, made when the module is loaded.
static USAGE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

const TIMEOUT_DOC: &str = "The wait for a lease ran out. Also a TimeoutError.";
const USAGE_DOC: &str = "leasehold was called wrongly: a bad key, duration, URL or size, \
     a store used after fork, a release of nothing held. Also a ValueError.";

fn make_type<'py>(
    py: Python<'py>,
    name: &str,
    bases: Bound<'py, PyTuple>,
    doc: &str,
) -> PyResult<Py<PyType>> {
    let dict = PyDict::new(py);
    dict.set_item("__module__", "leasehold._leasehold")?;
    dict.set_item("__doc__", doc)?;
    let ty = py
        .get_type::<PyType>()
        .call1((name, bases, dict))?
        .cast_into::<PyType>()
        .map_err(PyErr::from)?;
    Ok(ty.unbind())
}

fn two_bases<'py>(py: Python<'py>, std: Bound<'py, PyType>) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, [py.get_type::<Error>(), std])
}

/// An error of the type in `cell` (made at load), or of `fallback` if the
/// module was never loaded (it always is before any call here).
fn raise(cell: &PyOnceLock<Py<PyType>>, message: String, fallback: fn(String) -> PyErr) -> PyErr {
    Python::attach(|py| match cell.get(py) {
        Some(ty) => PyErr::from_type(ty.bind(py).clone(), message),
        None => fallback(message),
    })
}

/// A `UsageError` (a `ValueError` too) saying `message`.
pub fn usage_error(message: impl Into<String>) -> PyErr {
    raise(&USAGE, message.into(), Error::new_err)
}

/// A `Timeout` (a `TimeoutError` too) saying `message`.
pub fn timeout_error(message: impl Into<String>) -> PyErr {
    raise(&TIMEOUT, message.into(), Error::new_err)
}

/// A leasehold error as the matching Python exception, secrets of `url`
/// scrubbed from its message.
pub fn to_py(err: leasehold::Error, url: &str) -> PyErr {
    use leasehold::Error as E;
    let message = leasehold_stores::scrub(&leasehold::backend::error_chain(&err), Some(url));
    match err {
        E::TimedOut { .. } => timeout_error(message),
        E::LeaseLost { .. } => LeaseLost::new_err(message),
        E::InvalidInput { .. } | E::NotSupported(_) => usage_error(message),
        E::Closed => usage_error("the store was closed (store.close()): open it again to use it"),
        _ => StoreError::new_err(message),
    }
}

/// Adds the exceptions to the module.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    let timeout = TIMEOUT.get_or_try_init(py, || {
        make_type(
            py,
            "Timeout",
            two_bases(py, py.get_type::<PyTimeoutError>())?,
            TIMEOUT_DOC,
        )
    })?;
    m.add("Timeout", timeout.bind(py))?;
    m.add("LeaseLost", py.get_type::<LeaseLost>())?;
    m.add("StoreError", py.get_type::<StoreError>())?;
    let usage = USAGE.get_or_try_init(py, || {
        make_type(
            py,
            "UsageError",
            two_bases(py, py.get_type::<PyValueError>())?,
            USAGE_DOC,
        )
    })?;
    m.add("UsageError", usage.bind(py))?;
    Ok(())
}
