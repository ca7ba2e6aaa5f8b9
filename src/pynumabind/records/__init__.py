"""The advice record: the values an advice holds, its report, its JSON, and the store.

The floor between the planner and the binding.  Everything a worker needs to
read and follow the advice record lives here, so the binding reads it
without importing the advisor (which measures, and is heavy): the advisor
measures and decides, and hands its result down as these values.

The folder's rules:

* It may import the values, :mod:`pynumabind._os`, :mod:`pynumabind.discovery`
  (the store reads this machine's fingerprint through them) and itself;
  never the planner, the binding or anything above
  (``tests/package/test_layers.py``).
* The values, the machine fingerprint, the record's JSON, the rules a record
  must keep and the report are pure -- values in, values out, no I/O,
  importing only the values floor and each other -- so that the pure rule
  (:mod:`pynumabind.advisor.rule`) can build on them:
  :mod:`~pynumabind.records.values`, :mod:`~pynumabind.records._machine`,
  :mod:`~pynumabind.records._json`, :mod:`~pynumabind.records._validate`
  and :mod:`~pynumabind.records.report`.
* A record is untrusted input: it is bounded before it is parsed, read key
  by key, its text escaped as it is read, and checked against the machine
  before anything in it is followed (:mod:`~pynumabind.records._validate`).
* The files and the machine are read and written by four private modules
  only: :mod:`~pynumabind.records._paths` (where the records live: a record
  file, or a directory of records, one per machine type),
  :mod:`~pynumabind.records._file` (reading a record, and the checked,
  atomic save), :mod:`~pynumabind.records._directory` (which record of a
  directory a machine follows) and :mod:`~pynumabind.records._host` (this
  machine's fingerprint).  :mod:`~pynumabind.records.store` follows the
  record with them, and :meth:`Advice.save <pynumabind.Advice.save>` writes
  it with them.
* This package's ``__init__`` imports nothing, so importing a pure module
  here loads no other.

What is public: the modules without an underscore, each with its
``__all__``, for the other floors -- :mod:`~pynumabind.records.values` (the
measurements and the verdict), :mod:`~pynumabind.records.advice`
(:class:`~pynumabind.Advice`, and the saved
:class:`~pynumabind.records.advice.Record`), :mod:`~pynumabind.records.report`
(the text report and the package's one table format) and
:mod:`~pynumabind.records.store` (loading, and mode ``advised``).  Users
import these names where they are documented: ``pynumabind.Advice``,
``pynumabind.Recommendation`` and ``pynumabind.load_advice``; the values as
``pynumabind.advisor.NAME``; the store as :mod:`pynumabind.advisor.record`.
The underscored modules are private to the folder.
"""
