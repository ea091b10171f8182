-- A stream ticket names the token that minted it, so revoking (or the expiry of) that token
-- ends its tickets too. Tickets minted before this migration have no token and are refused;
-- they lived ten minutes at most anyway. Deleting a token row deletes its tickets.
ALTER TABLE stream_tickets
    ADD COLUMN token_id uuid REFERENCES api_tokens (id) ON DELETE CASCADE;
CREATE INDEX stream_tickets_token_idx ON stream_tickets (token_id);
