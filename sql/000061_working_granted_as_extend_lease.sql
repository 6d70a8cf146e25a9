-- working() granted to every role that may call extend_lease.
--
-- 000060 made working() and the library's extendLease and the HTTP extend call it in place
-- of extend_lease. A role granted extend_lease before (the worker and API roles of
-- `tusk roles create`, or roles an operator granted it by hand) would have lost the
-- extend until the roles were made again: permission denied, a 500 from the HTTP API.
-- Every role that holds EXECUTE on extend_lease gets it on working too (PUBLIC holds
-- neither; the owner has both).

DO $$
DECLARE
  r record;
BEGIN
  FOR r IN
    SELECT DISTINCT a.grantee::regrole AS role
    FROM pg_proc p CROSS JOIN LATERAL aclexplode(p.proacl) a
    WHERE p.oid = to_regprocedure(format('%I.extend_lease(bigint, bigint, integer)', :SCHEMA_LITERAL))
      AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
  LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.working(bigint, bigint, integer) TO %s', :SCHEMA_LITERAL, r.role);
  END LOOP;
END $$;
