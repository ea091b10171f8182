-- A person may cancel a run that waits for approval: its pending approvals become 'cancelled'
-- (never decided), so a later approve or reject is refused and says why.
ALTER TABLE approvals DROP CONSTRAINT approvals_status_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_status_check
    CHECK (status IN ('pending', 'approved', 'rejected', 'cancelled'));
